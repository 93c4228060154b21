/* Emptying and removing trees that an untrusted party may have shaped:
 * links are unlinked (their targets are never touched), FIFOs, sockets and
 * devices are removed without being opened, and depth costs neither stack
 * nor more than a fixed number of file descriptors. */
#include "fsx/fsx.h"
#include "fsx/fsx_internal.h"
#include "core/util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Directories deeper than this below the cleared directory are first moved
 * up to it under a temporary name (clearing does not care about shape), so
 * at most this many directories are open at once, whatever the depth. */
#define CLEAR_FD_WINDOW 64

typedef struct clear_frame {
        DIR *d;
        char *name; /* name in the parent frame */
} clear_frame;

typedef struct clear_state {
        airlock_error *err;
        int first; /* first error, 0 if none */
        unsigned long moved;
} clear_state;

static void note(clear_state *s, int code, const char *name, const char *what)
{
        if (s->first)
                return;
        s->first = al_error(s->err, code, name, "cannot %s %s: %s", what, name, strerror(-code));
}

/* Moves the directory name (in dirfd) to rootfd under a fresh name. */
static int move_up(clear_state *s, int dirfd, const char *name, int rootfd)
{
        for (int tries = 0; tries < 1000; tries++) {
                char tmp[64];
                snprintf(tmp, sizeof(tmp), ".airlock-clear.%lu", s->moved++);
                if (renameat2(dirfd, name, rootfd, tmp, RENAME_NOREPLACE) == 0)
                        return 0;
                if (errno != EEXIST)
                        return -errno;
        }
        return -EEXIST;
}

/* Removes the entry nm (of type type, DT_UNKNOWN when the listing did not
 * say) of the directory on top of the stack st of *n frames: anything but
 * a directory is unlinked; a directory is pushed to be emptied, or, past
 * the fd window, moved up to the root for a later pass (*again). A mount
 * point is never entered. Failures are noted in s, and clearing goes on. */
static void clear_entry(clear_state *s, clear_frame *st, size_t *n, const char *nm,
                        unsigned char type, dev_t root_dev, bool *again)
{
        int fd = dirfd(st[*n - 1].d);
        if (nm[0] == '.' && (nm[1] == '\0' || (nm[1] == '.' && nm[2] == '\0')))
                return;
        if (type == DT_UNKNOWN) {
                struct stat est;
                if (fstatat(fd, nm, &est, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno != ENOENT)
                                note(s, -errno, nm, "inspect");
                        return;
                }
                type = S_ISDIR(est.st_mode) ? DT_DIR : DT_REG;
        }
        if (type != DT_DIR) {
                /* unlinkat never follows a link and never opens a
                 * FIFO or a device. */
                if (unlinkat(fd, nm, 0) == 0 || errno == ENOENT)
                        return;
                if (errno != EISDIR) {
                        note(s, -errno, nm, "remove");
                        return;
                }
                /* Became a directory since it was listed. */
        }
        if (*n > CLEAR_FD_WINDOW) {
                int r = move_up(s, fd, nm, dirfd(st[0].d));
                if (r < 0)
                        note(s, r, nm, "move up");
                else
                        *again = true;
                return;
        }
        int cfd = openat(fd, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (cfd < 0) {
                if (errno == ENOTDIR || errno == ELOOP) {
                        /* Swapped for a non-directory: unlink that. */
                        if (unlinkat(fd, nm, 0) < 0 && errno != ENOENT)
                                note(s, -errno, nm, "remove");
                } else if (errno != ENOENT) {
                        /* Maybe an empty directory we may not read. */
                        int e = -errno;
                        if (unlinkat(fd, nm, AT_REMOVEDIR) < 0)
                                note(s, e, nm, "open directory");
                }
                return;
        }
        struct stat cst;
        if (fstat(cfd, &cst) < 0 || cst.st_dev != root_dev) {
                /* A mount point: never descend; removing it fails
                 * with EBUSY, which is reported. */
                close(cfd);
                if (unlinkat(fd, nm, AT_REMOVEDIR) < 0)
                        note(s, -errno, nm, "remove mount point");
                return;
        }
        char *copy = strdup(nm);
        DIR *cd = copy ? fdopendir(cfd) : NULL;
        if (!cd) {
                free(copy);
                close(cfd);
                note(s, -ENOMEM, nm, "open directory");
                return;
        }
        st[(*n)++] = (clear_frame){.d = cd, .name = copy};
}

static int clear_run(int dir_fd, airlock_error *err)
{
        clear_state s = {.err = err};
        struct stat root;
        if (fstat(dir_fd, &root) < 0)
                return al_error(err, -errno, NULL, "cannot inspect the directory to clear: %s",
                                strerror(errno));
        if (!S_ISDIR(root.st_mode))
                return al_error(err, -ENOTDIR, NULL, "cannot clear: not a directory");

        clear_frame st[CLEAR_FD_WINDOW + 1];
        size_t n = 0;
        /* A private open file description, so the caller's offset is not
         * moved and rewinding is ours alone. */
        int rfd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0)
                return al_error(err, -errno, NULL, "cannot open the directory to clear: %s",
                                strerror(errno));
        st[0].d = fdopendir(rfd);
        if (!st[0].d) {
                close(rfd);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        st[0].name = NULL;
        n = 1;
        bool again = false; /* something was moved up to the root: list it again */

        while (n > 0) {
                clear_frame *f = &st[n - 1];
                errno = 0;
                struct dirent *de = readdir(f->d);
                if (!de) {
                        if (errno)
                                note(&s, -errno, f->name ? f->name : ".", "list");
                        if (n == 1) {
                                if (!again)
                                        break;
                                again = false;
                                rewinddir(f->d);
                                continue;
                        }
                        char *name = f->name;
                        closedir(f->d);
                        n--;
                        if (unlinkat(dirfd(st[n - 1].d), name, AT_REMOVEDIR) < 0)
                                note(&s, -errno, name, "remove directory");
                        free(name);
                        continue;
                }
                clear_entry(&s, st, &n, de->d_name, de->d_type, root.st_dev, &again);
        }
        while (n > 0) {
                closedir(st[n - 1].d);
                free(st[n - 1].name);
                n--;
        }
        return s.first;
}

int fsx_clear_dir(int dir_fd, airlock_error *err)
{
        return fsx_error_utf8(err, clear_run(dir_fd, err));
}

static int remove_run(int parentfd, const char *name, airlock_error *err)
{
        if (!name || !*name || strchr(name, '/') || strcmp(name, ".") == 0 ||
            strcmp(name, "..") == 0)
                return al_error(err, -EINVAL, name, "cannot remove \"%s\": not a plain name",
                                name ? name : "");
        /* Each pass either removes a non-directory or clears a directory; an
         * entry swapped between kinds under our feet gets a few more tries. */
        for (int tries = 0; tries < 3; tries++) {
                if (unlinkat(parentfd, name, 0) == 0 || errno == ENOENT)
                        return 0;
                if (errno != EISDIR)
                        return al_error(err, -errno, name, "cannot remove %s: %s", name,
                                        strerror(errno));
                _cleanup_close_ int fd = openat(
                    parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
                if (fd < 0) {
                        if (errno == ENOENT)
                                return 0;
                        if (errno == ELOOP || errno == ENOTDIR)
                                continue;
                        return al_error(err, -errno, name, "cannot open %s: %s", name,
                                        strerror(errno));
                }
                /* A mount point is never emptied: what is mounted there is
                 * not part of the tree (the same rule as inside a clear). */
                struct stat pst, st;
                if (fstat(parentfd, &pst) < 0 || fstat(fd, &st) < 0)
                        return al_error(err, -errno, name, "cannot inspect %s: %s", name,
                                        strerror(errno));
                if (st.st_dev != pst.st_dev)
                        return al_error(err, -EBUSY, name,
                                        "cannot remove %s: another file system is mounted there",
                                        name);
                int r = fsx_clear_dir(fd, err);
                if (unlinkat(parentfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
                        r = al_error(err, -errno, name, "cannot remove directory %s: %s", name,
                                     strerror(errno));
                return r;
        }
        return al_error(err, -EBUSY, name, "cannot remove %s: it keeps changing", name);
}

int fsx_remove_at(int parentfd, const char *name, airlock_error *err)
{
        return fsx_error_utf8(err, remove_run(parentfd, name, err));
}
