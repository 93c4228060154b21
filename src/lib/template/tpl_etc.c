/* What the guest sees of the host's /etc.
 *
 * Debian's libraries read a few files under /etc: the dynamic linker's
 * cache; the alternatives links through which libblas.so.3, liblapack.so.3
 * and their kind are found; fontconfig's configuration; matplotlib's
 * system matplotlibrc; the media types; the time zone. The guest gets
 * copies of exactly these, taken when the template starts, and nothing
 * else of the host's /etc: no accounts, host name, machine id, resolver,
 * keys or credentials (README, "What the guest sees of /etc").
 *
 * The copies are made through directory fds with O_NOFOLLOW, so no link of
 * the host's /etc is ever followed on the host: a link is copied as a
 * link, and kept only if, resolved inside the guest's own root (openat2
 * with RESOLVE_IN_ROOT, from a fd of that root), it reaches a file of the
 * root's tmpfs or of a system directory bound into it. A link that
 * dangles there, or that reaches the host's /proc (still bound in the
 * root while it is built), is removed before any guest code runs. Files
 * are read from the fd that was checked to be a regular file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"
#include "template/template_internal.h"

#ifndef SYS_openat2
#define SYS_openat2 437
#endif

/* ---- what the guest sees of the host's /etc ----------------------------
 *
 * Debian's libraries read a few files under /etc: the dynamic linker's
 * cache; the alternatives links through which libblas.so.3, liblapack.so.3
 * and their kind are found; fontconfig's configuration; matplotlib's
 * system matplotlibrc; the media types; the time zone. The guest gets
 * copies of exactly these, taken when the template starts, and nothing
 * else of the host's /etc: no accounts, host name, machine id, resolver,
 * keys or credentials (README, "What the guest sees of /etc").
 *
 * The copies are made through directory fds with O_NOFOLLOW, so no link of
 * the host's /etc is ever followed on the host: a link is copied as a
 * link, and kept only if, resolved inside the guest's own root (openat2
 * with RESOLVE_IN_ROOT, from a fd of that root), it reaches a file of the
 * root's tmpfs or of a system directory bound into it. A link that
 * dangles there, or that reaches the host's /proc (still bound in the
 * root while it is built), is removed before any guest code runs. Files
 * are read from the fd that was checked to be a regular file. */
#define ETC_MAX_FILE    (1u << 20)
#define ETC_MAX_BYTES   (2u << 20)
#define ETC_MAX_ENTRIES 2048
#define ETC_MAX_DEPTH   6

typedef struct etc_copy {
        int root_fd; /* the new root, for resolving links inside it */
        dev_t devs[16];
        size_t n_devs;
        size_t entries, bytes;
        char *links[ETC_MAX_ENTRIES]; /* copied links, as paths below the root */
        size_t n_links;
} etc_copy;

/* The entries of the host's /etc that the guest gets. "alternatives" is
 * filtered: only the links of shared libraries (a name with ".so"). */
static const char *const etc_exposed[] = {"ld.so.cache",  "mime.types", "localtime",
                                          "matplotlibrc", "fonts",      "alternatives"};

static void etc_copy_entry(const struct template_state *tpl, etc_copy *ec, int src_dir, int dst_dir,
                           const char *rel_dir, const char *name, int depth, bool only_libs);

static void etc_copy_file(const struct template_state *tpl, etc_copy *ec, int src_dir, int dst_dir,
                          const char *name)
{
        _cleanup_close_ int in =
            openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat sb;
        if (in < 0 || fstat(in, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > ETC_MAX_FILE ||
            ec->bytes + (size_t)sb.st_size > ETC_MAX_BYTES)
                return;
        _cleanup_close_ int out =
            openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (out < 0)
                tpl_fail(tpl, -errno, "mount namespace", "cannot create /etc/.../%s: %m", name);
        char buf[16384];
        size_t left = (size_t)sb.st_size;
        /* Only as many bytes as the checked size: a file that grows while
         * it is read does not push the copy past its caps. */
        while (left > 0) {
                ssize_t n = read(in, buf, MIN(left, sizeof(buf)));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                if (al_write_full(out, buf, (size_t)n) < 0)
                        tpl_fail(tpl, -errno, "mount namespace", "cannot write /etc/.../%s: %m",
                                 name);
                left -= (size_t)n;
        }
        ec->bytes += (size_t)sb.st_size - left;
}

static void etc_copy_dir(const struct template_state *tpl, etc_copy *ec, int src_dir, int dst_dir,
                         const char *rel, const char *name, int depth, bool only_libs)
{
        _cleanup_close_ int in =
            openat(src_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
                return;
        _cleanup_closedir_ DIR *d = fdopendir(in);
        if (!d)
                return;
        TAKE_FD(in); /* the stream's now */
        if (mkdirat(dst_dir, name, 0755) < 0 && errno != EEXIST)
                tpl_fail(tpl, -errno, "mount namespace", "cannot create /%s: %m", rel);
        _cleanup_close_ int out =
            openat(dst_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (out < 0)
                tpl_fail(tpl, -errno, "mount namespace", "cannot open /%s: %m", rel);
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (only_libs && !strstr(de->d_name, ".so"))
                        continue;
                etc_copy_entry(tpl, ec, dirfd(d), out, rel, de->d_name, depth + 1, false);
        }
}

/* Copies src_dir/name to dst_dir/name, whose path below the new root is
 * rel_dir/name: a regular file by content, a directory entry by entry, a
 * link as a link (checked later, in etc_check_links); anything else, and
 * anything past the caps, is left out. */
static void etc_copy_entry(const struct template_state *tpl, etc_copy *ec, int src_dir, int dst_dir,
                           const char *rel_dir, const char *name, int depth, bool only_libs)
{
        struct stat sb;
        char rel[512];
        int n = snprintf(rel, sizeof(rel), "%s/%s", rel_dir, name);
        if (n < 0 || (size_t)n >= sizeof(rel) || ec->entries >= ETC_MAX_ENTRIES ||
            fstatat(src_dir, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
                return;
        ec->entries++;
        if (S_ISREG(sb.st_mode)) {
                etc_copy_file(tpl, ec, src_dir, dst_dir, name);
        } else if (S_ISDIR(sb.st_mode) && depth < ETC_MAX_DEPTH) {
                etc_copy_dir(tpl, ec, src_dir, dst_dir, rel, name, depth, only_libs);
        } else if (S_ISLNK(sb.st_mode) && ec->n_links < ETC_MAX_ENTRIES) {
                char target[1024];
                ssize_t k = readlinkat(src_dir, name, target, sizeof(target));
                if (k <= 0 || (size_t)k >= sizeof(target))
                        return;
                target[k] = '\0';
                if (symlinkat(target, dst_dir, name) < 0)
                        tpl_fail(tpl, -errno, "mount namespace", "cannot create /%s: %m", rel);
                ec->links[ec->n_links] = strdup(rel);
                if (!ec->links[ec->n_links])
                        tpl_fail(tpl, -ENOMEM, "mount namespace", "out of memory");
                ec->n_links++;
        }
}

/* Whether the link at rel (below the new root) resolves, inside that root,
 * to a file on one of the exposed file systems. The kernel resolves every
 * component and every link on the way as the guest will, confined to the
 * root; the answer is about the inode reached, not about a path. */
static bool etc_link_stays_inside(const etc_copy *ec, const char *rel)
{
        struct open_how how = {
            .flags = O_PATH | O_CLOEXEC,
            .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
        _cleanup_close_ int fd = (int)syscall(SYS_openat2, ec->root_fd, rel, &how, sizeof(how));
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) < 0)
                return false;
        for (size_t i = 0; i < ec->n_devs; i++)
                if (sb.st_dev == ec->devs[i])
                        return true;
        return false;
}

/* Removes every copied link that does not stay inside. Where openat2 is
 * missing (before Linux 5.6), nothing can be checked, and every link
 * goes. Removing one link can make another dangle, which is harmless: a
 * dangling link reaches nothing. */
static void etc_check_links(const struct template_state *tpl, etc_copy *ec)
{
        for (size_t i = 0; i < ec->n_links; i++) {
                if (!etc_link_stays_inside(ec, ec->links[i]) &&
                    unlinkat(ec->root_fd, ec->links[i], 0) < 0)
                        tpl_fail(tpl, -errno, "mount namespace", "cannot remove /%s: %m",
                                 ec->links[i]);
                free(ec->links[i]);
        }
        ec->n_links = 0;
}

/* The copying itself, in the process that calls it. */
static void copy_host_etc_here(const struct template_state *tpl)
{
        static etc_copy ec;
        ec.root_fd = open(NEWROOT, O_PATH | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int host_etc =
            open("/etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        _cleanup_close_ int guest_etc =
            open(NEWROOT "/etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (ec.root_fd < 0 || guest_etc < 0)
                tpl_fail(tpl, -errno, "mount namespace", "cannot open the new root: %m");
        if (host_etc < 0) {
                close_fd(&ec.root_fd);
                return;
        }
        /* The file systems a link may reach: the root's tmpfs and each
         * system directory bound into it. */
        static const char *const roots[] = {".",   "usr",   "bin",   "sbin",
                                            "lib", "lib64", "lib32", "libx32"};
        for (size_t i = 0; i < ARRAY_SIZE(roots); i++) {
                struct stat sb;
                if (fstatat(ec.root_fd, roots[i], &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISDIR(sb.st_mode) && ec.n_devs < ARRAY_SIZE(ec.devs))
                        ec.devs[ec.n_devs++] = sb.st_dev;
        }
        for (size_t i = 0; i < ARRAY_SIZE(etc_exposed); i++)
                etc_copy_entry(tpl, &ec, host_etc, guest_etc, "etc", etc_exposed[i], 0,
                               strcmp(etc_exposed[i], "alternatives") == 0);
        etc_check_links(tpl, &ec);
        close_fd(&ec.root_fd);
}

/* Copies the entries of etc_exposed from the host's /etc into the new
 * root's /etc, then removes every copied link that leads outside. */
void tpl_copy_host_etc(const struct template_state *tpl)
{
        /* A one-shot sandbox's template copies in its own process: it
         * learns a copy's pages only after a third copy (template.c),
         * which it is unlikely ever to make, and the fork, the child's
         * exit and the wait were 2 to 8 ms of a cold start's wall time
         * here (perf trace, load average 6). */
        if (tpl->params.single_run) {
                copy_host_etc_here(tpl);
                return;
        }
        /* Otherwise the copying runs in a child: its allocations
         * (directory streams, link names) would stay in the template's
         * heap as holes, which every copy inherits and the page-learning
         * probe must cover (in measurements, this alone made a fresh run
         * of print(1) 0.4 ms slower). The child works in the same mount
         * namespace and reports a failure to the host itself. */
        pid_t pid = fork();
        if (pid < 0)
                tpl_fail(tpl, -errno, "mount namespace", "cannot fork to copy /etc: %m");
        if (pid > 0) {
                int status = 0;
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                        ;
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        _exit(127);
                return;
        }
        copy_host_etc_here(tpl);
        _exit(0);
}
