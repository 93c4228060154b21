/* Helpers for the file transfer tests: a private scratch directory and a
 * few builders for the hostile corpus. Included by tests/unit/test_fsx*.c
 * only; every helper fails the current test on error. */
#ifndef AIRLOCK_FSX_TEST_H
#define AIRLOCK_FSX_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include "fsx/fsx.h"
#include "fsx/fsx_internal.h"
#include "core/util.h"

/* Group setup and teardown that force the component-by-component fallback
 * of fsx_open_beneath, as if the kernel had no openat2. */
static inline int setup_fallback(void **state)
{
        fsx_force_fallback = true;
        return 0;
}

static inline int teardown_fallback(void **state)
{
        fsx_force_fallback = false;
        return 0;
}

/* A scratch directory under /tmp: its path and an fd on it. */
typedef struct scratch {
        char path[64];
        int fd;
} scratch;

/* A scratch directory below base ("/tmp", or "/dev/shm" for the cases that
 * create very many files and would spend minutes on a slow disk). */
static inline void scratch_new_in(scratch *s, const char *base)
{
        snprintf(s->path, sizeof(s->path), "%s/fsx-test.XXXXXX", base);
        assert_non_null(mkdtemp(s->path));
        s->fd = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(s->fd >= 0);
}

static inline void scratch_new(scratch *s)
{
        scratch_new_in(s, "/tmp");
}

/* In /dev/shm when it has room (tens of thousands of directory operations
 * take seconds on a slow disk), else in /tmp. */
static inline void scratch_new_fast(scratch *s, uint64_t need_bytes)
{
        struct statvfs vfs;
        bool shm = statvfs("/dev/shm", &vfs) == 0 &&
                   (uint64_t)vfs.f_bavail * vfs.f_frsize > need_bytes + (64u << 20);
        scratch_new_in(s, shm ? "/dev/shm" : "/tmp");
}

/* Removes the scratch directory with the code under test (fsx_remove_at),
 * which also proves it can clear whatever the test left. */
static inline void scratch_free(scratch *s)
{
        if (s->fd < 0)
                return;
        close(s->fd);
        s->fd = -1;
        char *slash = strrchr(s->path, '/');
        *slash = '\0';
        int tmp = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        *slash = '/';
        assert_true(tmp >= 0);
        airlock_error err = {0};
        int r = fsx_remove_at(tmp, slash + 1, &err);
        close(tmp);
        if (r < 0)
                fail_msg("cleaning %s: %s", s->path, err.message);
}

static inline void put_file(int dfd, const char *rel, const char *data)
{
        int fd = openat(dfd, rel, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                fail_msg("create %s: %s", rel, strerror(errno));
        assert_int_equal(al_write_full(fd, data, strlen(data)), 0);
        close(fd);
}

static inline void put_bytes(int dfd, const char *rel, size_t n, char c)
{
        int fd = openat(dfd, rel, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        assert_true(fd >= 0);
        char *b = malloc(n ? n : 1);
        assert_non_null(b);
        memset(b, c, n);
        assert_int_equal(al_write_full(fd, b, n), 0);
        free(b);
        close(fd);
}

static inline void put_dir(int dfd, const char *rel)
{
        if (mkdirat(dfd, rel, 0755) < 0)
                fail_msg("mkdir %s: %s", rel, strerror(errno));
}

static inline void put_link(int dfd, const char *rel, const char *target)
{
        if (symlinkat(target, dfd, rel) < 0)
                fail_msg("symlink %s: %s", rel, strerror(errno));
}

static inline void put_fifo(int dfd, const char *rel)
{
        if (mkfifoat(dfd, rel, 0644) < 0)
                fail_msg("mkfifo %s: %s", rel, strerror(errno));
}

/* A character device node at rel with /dev/null's numbers (harmless to
 * open); false where this process may not make one (not root, nodev). */
static inline bool put_null_device(int dfd, const char *rel)
{
        return mknodat(dfd, rel, S_IFCHR | 0644, makedev(1, 3)) == 0;
}

/* An inotify instance watching rel for IN_OPEN: opened_since(fd) then says
 * whether anything opened it (a device node's or a FIFO's open is an event
 * as a file's is). */
static inline int watch_opens(int dfd, const char *rel)
{
        int ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d/%s", dfd, rel);
        if (ifd < 0 || inotify_add_watch(ifd, path, IN_OPEN) < 0)
                fail_msg("inotify on %s: %s", rel, strerror(errno));
        return ifd;
}

static inline bool opened_since(int ifd)
{
        char buf[4096];
        return read(ifd, buf, sizeof(buf)) > 0;
}

/* A bound Unix socket at dir/rel (dir is an absolute path). */
static inline void put_socket(const char *dir, const char *rel)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, rel);
        assert_true(n > 0 && (size_t)n < sizeof(sa.sun_path));
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                fail_msg("bind %s: %s", sa.sun_path, strerror(errno));
        close(fd);
}

static inline int open_dir(int dfd, const char *rel)
{
        int fd = openat(dfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                fail_msg("open %s: %s", rel, strerror(errno));
        return fd;
}

/* Reads a whole small file relative to dfd into a malloc'd string. */
static inline char *get_file(int dfd, const char *rel)
{
        int fd = openat(dfd, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return NULL;
        dynbuf b;
        dynbuf_init(&b, 1 << 24);
        char chunk[4096];
        ssize_t n;
        while ((n = read(fd, chunk, sizeof(chunk))) > 0)
                assert_int_equal(dynbuf_append(&b, chunk, (size_t)n), 0);
        close(fd);
        return dynbuf_take(&b, NULL);
}

/* A chain of depth nested directories "d/d/d/..." below dfd, built with
 * fds so that no path string ever grows past PATH_MAX. */
static inline void put_deep(int dfd, unsigned depth, const char *leaf_file)
{
        int cur = dup(dfd);
        assert_true(cur >= 0);
        for (unsigned i = 0; i < depth; i++) {
                assert_int_equal(mkdirat(cur, "d", 0755), 0);
                int next = openat(cur, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                assert_true(next >= 0);
                close(cur);
                cur = next;
        }
        if (leaf_file)
                put_file(cur, leaf_file, "leaf");
        close(cur);
}

static inline fsx_limits big_limits(void)
{
        return (fsx_limits){
            .max_bytes = 1ull << 40, .max_files = 1000000, .max_depth = 256, .max_file = 0};
}

#endif
