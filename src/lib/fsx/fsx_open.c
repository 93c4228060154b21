/* Safe opens beneath a directory fd: openat2 with RESOLVE_BENEATH,
 * RESOLVE_NO_SYMLINKS and RESOLVE_NO_MAGICLINKS where the kernel has it, and
 * a component-by-component O_NOFOLLOW walk where it does not. */
#include "fsx/fsx.h"
#include "fsx/fsx_internal.h"
#include "core/util.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

bool fsx_force_fallback = false;

/* Set once the kernel answered ENOSYS, so later calls skip the syscall. */
static atomic_bool openat2_missing;

/* True when relpath is absolute or has a ".." component. Both openat2 (with
 * RESOLVE_BENEATH) and the fallback would allow a ".." that stays inside the
 * tree; refusing it outright keeps the two paths identical and removes any
 * dependence on the tree's shape at the time of the call. */
static bool path_escapes(const char *p)
{
        if (p[0] == '/')
                return true;
        for (const char *s = p; *s;) {
                const char *e = strchrnul(s, '/');
                if (e - s == 2 && s[0] == '.' && s[1] == '.')
                        return true;
                s = *e ? e + 1 : e;
        }
        return false;
}

/* Opens the last component name in at, never following a link there. */
static int open_last(int at, const char *name, int flags, mode_t mode)
{
        int fd = openat(at, name, flags | O_NOFOLLOW | O_CLOEXEC, mode);
        if (fd < 0) {
                int r = -errno;
                struct stat st;
                if (r == -ENOTDIR && fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISLNK(st.st_mode))
                        r = -ELOOP;
                return r;
        }
        if (flags & O_PATH) {
                /* O_PATH|O_NOFOLLOW opens the link itself rather than failing. */
                struct stat st;
                if (fstat(fd, &st) < 0) {
                        int r = -errno;
                        close(fd);
                        return r;
                }
                if (S_ISLNK(st.st_mode)) {
                        close(fd);
                        return -ELOOP;
                }
        }
        return fd;
}

/* The fallback: opens every intermediate component with O_PATH|O_DIRECTORY|
 * O_NOFOLLOW relative to the previous one, then the last with the caller's
 * flags plus O_NOFOLLOW. A symlink at any point gives -ELOOP. Mount points
 * are crossed, as openat2 without RESOLVE_NO_XDEV does. */
static int open_fallback(int dirfd, const char *relpath, int flags, mode_t mode)
{
        /* One component, the walker's case: no copy, no split. */
        if (*relpath && !strchr(relpath, '/') && strcmp(relpath, ".") != 0)
                return open_last(dirfd, relpath, flags, mode);

        _cleanup_free_ char *copy = strdup(relpath);
        if (!copy)
                return -ENOMEM;

        /* Split into components, dropping empty and "." ones. */
        char *parts[64];
        size_t n = 0;
        _cleanup_free_ char **many = NULL;
        char **v = parts;
        size_t cap = ARRAY_SIZE(parts);
        for (char *s = copy; *s;) {
                char *e = strchrnul(s, '/');
                bool last = *e == '\0';
                *e = '\0';
                if (*s && strcmp(s, ".") != 0) {
                        if (n == cap) {
                                char **nv = realloc(many, 2 * cap * sizeof(*nv));
                                if (!nv)
                                        return -ENOMEM;
                                if (!many)
                                        memcpy(nv, parts, sizeof(parts));
                                many = nv;
                                v = many;
                                cap *= 2;
                        }
                        v[n++] = s;
                }
                s = last ? e : e + 1;
        }
        if (n == 0) {
                int fd = openat(dirfd, ".", flags | O_CLOEXEC, mode);
                return fd < 0 ? -errno : fd;
        }

        _cleanup_close_ int cur = -1;
        for (size_t i = 0; i + 1 < n; i++) {
                int at = cur >= 0 ? cur : dirfd;
                int fd = openat(at, v[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0) {
                        int r = -errno;
                        struct stat st;
                        /* O_PATH|O_NOFOLLOW|O_DIRECTORY on a symlink fails with
                         * ENOTDIR; tell the caller it was a link. */
                        if (r == -ENOTDIR && fstatat(at, v[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                            S_ISLNK(st.st_mode))
                                r = -ELOOP;
                        return r;
                }
                closep(&cur);
                cur = fd;
        }
        return open_last(cur >= 0 ? cur : dirfd, v[n - 1], flags, mode);
}

int fsx_open_beneath(int dirfd, const char *relpath, int flags, mode_t mode)
{
        if (!relpath)
                return -EINVAL;
        if (path_escapes(relpath))
                return -EXDEV;

        if (!fsx_force_fallback && !atomic_load_explicit(&openat2_missing, memory_order_relaxed)) {
                struct open_how how = {
                    .flags = (uint64_t)(flags | O_CLOEXEC),
                    /* openat2 refuses a mode without O_CREAT or O_TMPFILE
                     * (whose bits include O_DIRECTORY's). */
                    .mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? mode : 0,
                    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
                };
                const char *p = *relpath ? relpath : ".";
                for (;;) {
                        long fd = syscall(SYS_openat2, dirfd, p, &how, sizeof(how));
                        if (fd >= 0)
                                return (int)fd;
                        if (errno == EINTR)
                                continue;
                        /* EAGAIN only comes with ".." racing a rename; there
                         * is no ".." here, but stay correct if it ever does. */
                        if (errno == EAGAIN)
                                break;
                        /* Some container seccomp profiles answer EPERM for
                         * system calls they do not know, openat2 among them:
                         * let the fallback decide (it gives the same EPERM
                         * if that is the real answer). */
                        if (errno == EPERM)
                                break;
                        if (errno != ENOSYS)
                                return -errno;
                        atomic_store_explicit(&openat2_missing, true, memory_order_relaxed);
                        break;
                }
        }
        return open_fallback(dirfd, relpath, flags, mode);
}
