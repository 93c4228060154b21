/* Replays a fuzzer's corpus and saved crashes without libFuzzer, so that
 * `make check` runs every input with the normal compiler and flags. Each
 * file in fuzz/corpus/NAME/ and fuzz/crashes/NAME/ (or the files and folders
 * given as arguments) is fed to LLVMFuzzerTestOneInput; an input that
 * crashes kills the process, which the test runner counts as a failure.
 * Closing line: "replay_NAME: N passed, 0 failed". */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef FUZZ_NAME
#error "FUZZ_NAME must be defined"
#endif
#ifndef FUZZ_DIR
#define FUZZ_DIR "fuzz"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(int dirfd, const char *name)
{
        int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return 0;
        }
        size_t size = (size_t)st.st_size;
        /* One extra byte so that a zero-size input still has a buffer. */
        uint8_t *buf = malloc(size + 1);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        size_t off = 0;
        while (off < size) {
                ssize_t n = read(fd, buf + off, size - off);
                if (n <= 0)
                        break;
                off += (size_t)n;
        }
        close(fd);
        /* Exactly size bytes, as libFuzzer passes them (ASan sees overreads). */
        uint8_t *exact = malloc(off ? off : 1);
        if (!exact) {
                free(buf);
                return -ENOMEM;
        }
        memcpy(exact, buf, off);
        free(buf);
        fprintf(stderr, "replay %s\n", name);
        LLVMFuzzerTestOneInput(exact, off);
        free(exact);
        return 1;
}

/* Returns the number of inputs replayed, or -1 when path is missing. */
static long replay_path(const char *path)
{
        struct stat st;
        if (stat(path, &st) < 0)
                return -1;
        if (!S_ISDIR(st.st_mode))
                return replay_file(AT_FDCWD, path) > 0 ? 1 : 0;
        DIR *d = opendir(path);
        if (!d)
                return -1;
        long n = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.')
                        continue; /* ., .., .gitkeep */
                if (replay_file(dirfd(d), e->d_name) > 0)
                        n++;
        }
        closedir(d);
        return n;
}

int main(int argc, char **argv)
{
        long total = 0;
        if (argc > 1) {
                for (int i = 1; i < argc; i++) {
                        long n = replay_path(argv[i]);
                        if (n < 0) {
                                printf("replay_%s: %s: %s\n", FUZZ_NAME, argv[i], strerror(errno));
                                printf("replay_%s: %ld passed, 1 failed\n", FUZZ_NAME, total);
                                return 1;
                        }
                        total += n;
                }
        } else {
                long c = replay_path(FUZZ_DIR "/corpus/" FUZZ_NAME);
                long k = replay_path(FUZZ_DIR "/crashes/" FUZZ_NAME);
                if (c <= 0) {
                        /* A fuzzer without seeds tests nothing: say so. */
                        printf("replay_%s: no corpus in %s/corpus/%s\n", FUZZ_NAME, FUZZ_DIR,
                               FUZZ_NAME);
                        printf("replay_%s: 0 passed, 1 failed\n", FUZZ_NAME);
                        return 1;
                }
                total = c + (k > 0 ? k : 0);
        }
        printf("replay_%s: %ld passed, 0 failed\n", FUZZ_NAME, total);
        return 0;
}
