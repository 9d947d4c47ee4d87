// SPDX-License-Identifier: MIT
/*
 * replay_main - runs a libFuzzer target's LLVMFuzzerTestOneInput() on
 * every file of a corpus directory, without libFuzzer (gcc, ASan/UBSan):
 * the corpus replay of `make check`.
 *   replay-TARGET DIR...     exit 0: every input ran; 1: one could not be
 *                            read (a crash aborts the program)
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long n;

	if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET)) {
		perror(path);
		if (f)
			fclose(f);
		return -1;
	}
	buf = malloc((size_t)n + 1);	/* exactly n bytes are the input */
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		perror(path);
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int i, files = 0, bad = 0;

	for (i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		struct dirent *de;

		if (!d) {
			perror(argv[i]);
			return 1;
		}
		while ((de = readdir(d))) {
			char path[4096];

			if (de->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", argv[i],
				 de->d_name);
			bad |= run_file(path) != 0;
			files++;
		}
		closedir(d);
	}
	printf("%d inputs replayed\n", files);
	if (!files) {
		fprintf(stderr, "no inputs\n");
		return 1;
	}
	return bad;
}
