/* The guest's root, built once in the template's mount namespace: a
 * read-only tmpfs holding /usr (and the merged links), a minimal /etc, a
 * minimal /dev, the staged /input, the --python-path folders, the cache,
 * and the mount points for each copy's /output, /tmp and /proc. Also the
 * mount helpers the copies use (tpl_make_readonly). */
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/pypath.h"
#include "core/util.h"
#include "template/template_internal.h"

static void write_file(const struct template_state *tpl, const char *path, const char *data)
{
        _cleanup_close_ int fd =
            open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 || al_write_full(fd, data, strlen(data)) < 0)
                tpl_fail(tpl, -errno, "mount namespace", "cannot write %s: %m", path);
}

static void make_dir(const struct template_state *tpl, const char *path, mode_t mode)
{
        if (mkdir(path, mode) < 0 && errno != EEXIST)
                tpl_fail(tpl, -errno, "mount namespace", "cannot create %s: %m", path);
}

/* Makes a mount read-only (and nosuid, nodev unless dev_ok) without
 * clearing flags the kernel locked when the mount crossed into our user
 * namespace. mount_setattr changes only the bits it is given. */
int tpl_make_readonly(const char *path, bool dev_ok, bool noexec)
{
        struct mount_attr attr = {
            .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | (dev_ok ? 0 : MOUNT_ATTR_NODEV) |
                        (noexec ? MOUNT_ATTR_NOEXEC : 0),
        };
        if (syscall(SYS_mount_setattr, AT_FDCWD, path, AT_RECURSIVE, &attr, sizeof(attr)) == 0)
                return 0;
        if (errno != ENOSYS)
                return -errno;
        struct statvfs sv;
        if (statvfs(path, &sv) < 0)
                return -errno;
        unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID;
        if (!dev_ok)
                flags |= MS_NODEV;
        if (noexec || (sv.f_flag & ST_NOEXEC))
                flags |= MS_NOEXEC;
        if (sv.f_flag & ST_NODEV)
                flags |= MS_NODEV;
        if (sv.f_flag & ST_NOATIME)
                flags |= MS_NOATIME;
        if (sv.f_flag & ST_RELATIME)
                flags |= MS_RELATIME;
        return mount(NULL, path, NULL, flags, NULL) < 0 ? -errno : 0;
}

static void bind_ro(const struct template_state *tpl, const char *src, const char *dst, bool dev_ok)
{
        if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
                tpl_fail(tpl, -errno, "bind mount", "cannot bind %s: %m", src);
        int r = tpl_make_readonly(dst, dev_ok, false);
        if (r < 0)
                tpl_fail(tpl, r, "read-only bind mount", "cannot make %s read-only: %s", dst,
                         strerror(-r));
}

/* Contract: mounts at DST (an empty directory of the new root) a
 * read-only overlay named SOURCE whose one visible layer is the directory
 * LAYER_FD is open on (a tree attached in this namespace), with FLAGS.
 * Returns 0, or the -errno of the overlay mount, after which the caller
 * binds the layer instead.
 *
 * This is how a host folder reaches the guest without its host path: a
 * bind mount shows in the guest's /proc/self/mountinfo the root of the
 * mount within its file system ("/tmp/airlock-stage-XXXXXX/input"), since
 * the kernel prints a bind mount's root relative to its superblock and
 * nothing in a bind can change that. A read-only overlay is a file system
 * of its own, whose root is "/", and its options name its layers only as
 * given, here /proc/self/fd links. Its lower layers are the tree and the
 * empty mount point itself (an overlay without an upper layer needs two);
 * the root is made read-only later, so that one stays empty. Nothing is
 * copied: overlay reads the files in place, and a mount below the layer's
 * root is not part of the overlay (so none of the host's shows through).
 * redirect_dir=nofollow: no xattr on a layer can send a lookup elsewhere.
 * Kernels that refuse overlay in a user namespace (before 5.11), or over
 * an idmapped layer (before 5.19), answer ENODEV, EPERM or EINVAL. */
static int mount_ro_overlay(const struct template_state *tpl, const char *source, int layer_fd,
                            const char *dst, unsigned long flags)
{
        _cleanup_close_ int empty = open(dst, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (empty < 0)
                tpl_fail(tpl, -errno, "mount namespace", "cannot open %s: %m", dst);
        char opts[128];
        snprintf(opts, sizeof(opts),
                 "lowerdir=/proc/self/fd/%d:/proc/self/fd/%d,redirect_dir=nofollow", layer_fd,
                 empty);
        return mount(source, dst, "overlay", MS_RDONLY | flags, opts) < 0 ? -errno : 0;
}

static bool overlay_unsupported(int r)
{
        return r == -ENODEV || r == -EPERM || r == -EINVAL;
}

/* Mounts the staged input (TEMPLATE_INPUT_FD) read-only at NEWROOT/input,
 * as an overlay (mount_ro_overlay), so that the host's staging path
 * appears nowhere in the guest; where the kernel refuses that overlay the
 * input is bound, and then the staging path shows. */
#define INPUT_ATTACH NEWROOT "/.staged-input"

static void mount_input(const struct template_state *tpl)
{
        /* As root, the host sends a detached copy of the staged tree
         * (open_tree), which this template, no longer root, could not
         * reach by path. Overlay takes layers only from this namespace, so
         * the copy is attached for the time the overlay is made, then
         * detached again: mountinfo shows no trace of it. */
        if (tpl->params.input_tree) {
                make_dir(tpl, INPUT_ATTACH, 0700);
                if (syscall(SYS_move_mount, TEMPLATE_INPUT_FD, "", AT_FDCWD, INPUT_ATTACH,
                            MOVE_MOUNT_F_EMPTY_PATH) < 0)
                        tpl_fail(tpl, -errno, "bind mount", "cannot attach the staged input: %m");
                _cleanup_close_ int fd =
                    open(INPUT_ATTACH, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || dup2(fd, TEMPLATE_INPUT_FD) < 0)
                        tpl_fail(tpl, -errno, "bind mount", "cannot open the staged input: %m");
        }
        int r = mount_ro_overlay(tpl, "airlock-input", TEMPLATE_INPUT_FD, NEWROOT "/input",
                                 MS_NOSUID | MS_NODEV | MS_NOEXEC);
        if (r < 0) {
                if (!overlay_unsupported(r))
                        tpl_fail(tpl, r, "overlay mount", "cannot mount the staged input: %s",
                                 strerror(-r));
                char src[64];
                snprintf(src, sizeof(src), "/proc/self/fd/%d", TEMPLATE_INPUT_FD);
                if (mount(src, NEWROOT "/input", NULL, MS_BIND | MS_REC, NULL) < 0)
                        tpl_fail(tpl, -errno, "bind mount", "cannot bind the staged input: %m");
        }
        r = tpl_make_readonly(NEWROOT "/input", false, true);
        if (r < 0)
                tpl_fail(tpl, r, "read-only bind mount", "cannot make /input read-only: %s",
                         strerror(-r));
        if (tpl->params.input_tree &&
            (umount2(INPUT_ATTACH, MNT_DETACH) < 0 || rmdir(INPUT_ATTACH) < 0))
                tpl_fail(tpl, -errno, "bind mount", "cannot detach the staged input: %m");
}

/* A top-level entry of the host root that Python needs: merged-/usr
 * symlinks are copied as symlinks, directories are bound read-only. */
static void add_system_entry(const struct template_state *tpl, const char *name)
{
        char host[64], dst[96], target[256];
        snprintf(host, sizeof(host), "/%s", name);
        snprintf(dst, sizeof(dst), NEWROOT "/%s", name);
        struct stat sb;
        if (lstat(host, &sb) < 0)
                return;
        if (S_ISLNK(sb.st_mode)) {
                ssize_t n = readlink(host, target, sizeof(target) - 1);
                if (n <= 0)
                        return;
                target[n] = '\0';
                if (symlink(target, dst) < 0)
                        tpl_fail(tpl, -errno, "mount namespace", "cannot create %s: %m", dst);
        } else if (S_ISDIR(sb.st_mode)) {
                make_dir(tpl, dst, 0755);
                bind_ro(tpl, host, dst, false);
        }
}

static void bind_file(const struct template_state *tpl, const char *host, const char *dst, bool dev)
{
        int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                tpl_fail(tpl, -errno, "mount namespace", "cannot create %s: %m", dst);
        close(fd);
        bind_ro(tpl, host, dst, dev);
}

/* A --python-path folder the host did not send as a mount (the host is
 * not root) is cloned here by its path, looked up with the guest's ids,
 * before the new root's tmpfs covers /tmp, where the folder may be. The
 * clone goes on the fd number the host's mount would have had. */
static void open_python_paths(const struct template_state *tpl)
{
        for (size_t i = 0; i < tpl->params.n_python_paths; i++) {
                if (tpl->params.python_path_fd[i])
                        continue;
                const char *host = tpl->params.python_paths[i];
                _cleanup_close_ int fd =
                    (int)syscall(SYS_open_tree, AT_FDCWD, host, OPEN_TREE_CLONE | O_CLOEXEC);
                /* Mounts below it that came locked from the host's
                 * namespace cannot be left out. */
                if (fd < 0 && errno == EINVAL)
                        fd = (int)syscall(SYS_open_tree, AT_FDCWD, host,
                                          OPEN_TREE_CLONE | O_CLOEXEC | AT_RECURSIVE);
                if (fd < 0)
                        tpl_fail(tpl, -errno, "python-path",
                                 "--python-path %s cannot be reached by the sandbox's user (uid %u "
                                 "on the host): %m; make it and the folders above it readable and "
                                 "searchable for that user",
                                 host, (unsigned)tpl->params.guest_uid);
                if (dup3(fd, TEMPLATE_PYPATH_FD + (int)i, O_CLOEXEC) < 0)
                        tpl_fail(tpl, -errno, "bind mount", "cannot mount --python-path %s: %m",
                                 host);
        }
}

/* Where a --python-path folder is attached while its overlay is made. */
#define PYPATH_ATTACH NEWROOT "/.staged-pythonpath"

/* Contract: mounts each --python-path folder N read-only, nosuid and nodev
 * at /opt/airlock/pythonpath/N of the new root, and nothing else of the
 * host: not the path that leads to it (the mount is an overlay over the
 * folder, mount_ro_overlay, whose root in mountinfo is "/" where a bind's
 * would be the host path, /tmp/airlock-servers-XXXXXX for the stubs of
 * upstream servers), not the mounts below it. A link in the folder
 * resolves in the guest's root, so it reaches only what the guest sees
 * anyway (/usr, /input, the other folders); that is why the mount keeps
 * following links, as packages need (lib.so -> lib.so.1). Not noexec: C
 * extensions are mapped executable. As root the host sends a detached
 * mount of the folder, idmapped so that its owner is the guest's id;
 * otherwise open_python_paths cloned it by its path, looked up with the
 * guest's ids. Either way a folder the guest could not read fails here,
 * naming it, rather than at the first import. A kernel that refuses the
 * overlay gets the folder's mount itself, which shows the host path. */
static void mount_python_paths(const struct template_state *tpl)
{
        if (!tpl->params.n_python_paths)
                return;
        make_dir(tpl, NEWROOT "/opt", 0755);
        make_dir(tpl, NEWROOT "/opt/airlock", 0755);
        make_dir(tpl, NEWROOT PYPATH_GUEST_DIR, 0755);
        for (size_t i = 0; i < tpl->params.n_python_paths; i++) {
                const char *host = tpl->params.python_paths[i];
                char dst[96];
                snprintf(dst, sizeof(dst), NEWROOT PYPATH_GUEST_DIR "/%zu", i);
                make_dir(tpl, dst, 0755);
                /* Overlay takes layers only from this namespace: the
                 * folder's detached mount is attached for the time the
                 * overlay is made, then detached again. */
                make_dir(tpl, PYPATH_ATTACH, 0700);
                int fd = TEMPLATE_PYPATH_FD + (int)i;
                if (syscall(SYS_move_mount, fd, "", AT_FDCWD, PYPATH_ATTACH,
                            MOVE_MOUNT_F_EMPTY_PATH) < 0)
                        tpl_fail(tpl, -errno, "bind mount", "cannot mount --python-path %s: %m",
                                 host);
                close(fd);
                _cleanup_close_ int layer =
                    open(PYPATH_ATTACH, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (layer < 0)
                        tpl_fail(tpl, -errno, "bind mount", "cannot open --python-path %s: %m",
                                 host);
                int r =
                    mount_ro_overlay(tpl, "airlock-pythonpath", layer, dst, MS_NOSUID | MS_NODEV);
                if (r < 0 && !overlay_unsupported(r))
                        tpl_fail(tpl, r, "overlay mount", "cannot mount --python-path %s: %s", host,
                                 strerror(-r));
                if (r < 0 ? syscall(SYS_move_mount, AT_FDCWD, PYPATH_ATTACH, AT_FDCWD, dst, 0) < 0
                          : umount2(PYPATH_ATTACH, MNT_DETACH) < 0)
                        tpl_fail(tpl, -errno, "bind mount", "cannot mount --python-path %s: %m",
                                 host);
                if (rmdir(PYPATH_ATTACH) < 0)
                        tpl_fail(tpl, -errno, "mount namespace", "cannot remove %s: %m",
                                 PYPATH_ATTACH);
                struct mount_attr attr = {
                    .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                };
                if (syscall(SYS_mount_setattr, AT_FDCWD, dst, 0, &attr, sizeof(attr)) < 0 &&
                    (errno != ENOSYS ||
                     mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                           NULL) < 0))
                        tpl_fail(tpl, -errno, "read-only bind mount",
                                 "cannot make --python-path %s read-only: %m", host);
                /* Reading as the guest will: the template's capabilities
                 * cover only files its own id owns, which the guest owns
                 * too. */
                _cleanup_close_ int dir = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dir < 0 || faccessat(dir, ".", R_OK | X_OK, AT_EACCESS) < 0)
                        tpl_fail(tpl, -errno, "python-path",
                                 "--python-path %s cannot be read by the sandbox's user (uid %u on "
                                 "the host): %m; make it readable for that user",
                                 host, (unsigned)tpl->params.guest_uid);
        }
}

/* The guest's /etc: the few files airlock writes itself, then the copies
 * of the few of the host's that libraries read (tpl_etc.c). Runs after
 * the system directories are bound into the new root, whose file systems
 * the copied links may reach. */
static void build_etc(const struct template_state *tpl)
{
        make_dir(tpl, NEWROOT "/etc", 0755);
        write_file(tpl, NEWROOT "/etc/passwd",
                   "root:x:0:0:sandbox:/tmp:/bin/sh\n"
                   "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n");
        write_file(tpl, NEWROOT "/etc/group", "root:x:0:\nnogroup:x:65534:\n");
        write_file(tpl, NEWROOT "/etc/hosts", "127.0.0.1 localhost airlock\n::1 localhost\n");
        write_file(tpl, NEWROOT "/etc/hostname", "airlock\n");
        write_file(tpl, NEWROOT "/etc/nsswitch.conf",
                   "passwd: files\ngroup: files\nhosts: files\n");
        tpl_copy_host_etc(tpl);
}

/* The template's cache directory, GUEST_CACHE_DIR: a tmpfs of its own,
 * writable only while the template fills it (matplotlib's font list, see
 * guest_start_cache_builder) and read-only to every guest. The guest's
 * /tmp is fresh in every run, so a cache kept there would be rebuilt by
 * every run that imports matplotlib, about a second each here. */
#define CACHE_TMPFS_OPTS "size=16m,nr_inodes=4096,mode=0755"

static void make_cache_dir(const struct template_state *tpl)
{
        make_dir(tpl, NEWROOT GUEST_CACHE_DIR, 0755);
        if (mount("tmpfs", NEWROOT GUEST_CACHE_DIR, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  CACHE_TMPFS_OPTS) < 0)
                tpl_fail(tpl, -errno, "tmpfs", "cannot mount the cache tmpfs: %m");
}

/* Once the cache builder has exited (or could not start), the cache
 * becomes read-only for the template, and so for every copy made from
 * then on. Copies made before make their own view of it read-only
 * (tpl_copy_main). */
void tpl_settle_cache(struct template_state *tpl)
{
        if (tpl->cache_sealed || tpl->cache_builder == 0)
                return;
        if (tpl->cache_builder > 0) {
                pid_t w;
                while ((w = waitpid(tpl->cache_builder, NULL, WNOHANG)) < 0 && errno == EINTR)
                        ;
                if (w == 0)
                        return;
        }
        int r = tpl_make_readonly(GUEST_CACHE_DIR, false, true);
        if (r < 0)
                tpl_fail(tpl, r, "read-only bind mount", "cannot make %s read-only: %s",
                         GUEST_CACHE_DIR, strerror(-r));
        tpl->cache_sealed = true;
}

/* Builds the guest's root: a read-only tmpfs holding /usr (and the merged
 * links), a minimal /etc, a minimal /dev, /input, and mount points for the
 * per-copy /output, /tmp and /proc. No other host path is reachable. */
void tpl_build_root(const struct template_state *tpl)
{
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                tpl_fail(tpl, -errno, "mount namespace", "cannot make mounts private: %m");
        open_python_paths(tpl);
        if (mount("tmpfs", NEWROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0755") < 0)
                tpl_fail(tpl, -errno, "tmpfs", "cannot mount the root tmpfs: %m");

        static const char *const sys_entries[] = {"usr",   "bin",   "sbin",  "lib",
                                                  "lib64", "lib32", "libx32"};
        for (size_t i = 0; i < ARRAY_SIZE(sys_entries); i++)
                add_system_entry(tpl, sys_entries[i]);

        build_etc(tpl);
        make_cache_dir(tpl);

        make_dir(tpl, NEWROOT "/dev", 0755);
        /* tty is the caller's controlling terminal: in a copy, at most a
         * pseudo-terminal of its own (the template has none). */
        static const char *const devs[] = {"null", "zero", "full", "random", "urandom", "tty"};
        for (size_t i = 0; i < ARRAY_SIZE(devs); i++) {
                /* A shared mapping of /dev/zero is shared memory that no
                 * rlimit counts: without a cgroup to charge it to, the
                 * guest has no /dev/zero. */
                if (!tpl->params.cgroup && strcmp(devs[i], "zero") == 0)
                        continue;
                char host[32], dst[64];
                snprintf(host, sizeof(host), "/dev/%s", devs[i]);
                snprintf(dst, sizeof(dst), NEWROOT "/dev/%s", devs[i]);
                bind_file(tpl, host, dst, true);
        }
        if (symlink("/proc/self/fd", NEWROOT "/dev/fd") < 0 ||
            symlink("/proc/self/fd/0", NEWROOT "/dev/stdin") < 0 ||
            symlink("/proc/self/fd/1", NEWROOT "/dev/stdout") < 0 ||
            symlink("/proc/self/fd/2", NEWROOT "/dev/stderr") < 0)
                tpl_fail(tpl, -errno, "mount namespace", "cannot create /dev links: %m");
        make_dir(tpl, NEWROOT "/dev/shm", 01777);
        /* Each copy mounts a devpts instance of its own on /dev/pts
         * (tpl_copy_main); /dev/ptmx is its multiplexer. */
        make_dir(tpl, NEWROOT "/dev/pts", 0755);
        if (symlink("pts/ptmx", NEWROOT "/dev/ptmx") < 0)
                tpl_fail(tpl, -errno, "mount namespace", "cannot create /dev/ptmx: %m");

        make_dir(tpl, NEWROOT "/input", 0755);
        if (tpl->params.has_input)
                mount_input(tpl);
        close(TEMPLATE_INPUT_FD);
        make_dir(tpl, NEWROOT "/output", 0755);
        make_dir(tpl, NEWROOT "/tmp", 01777);
        mount_python_paths(tpl);

        /* Each copy mounts its own procfs. The kernel allows that in a user
         * namespace only while a fully visible procfs is mounted in the
         * mount namespace, so the host's stays under the copy's new one;
         * it is covered before any guest code runs. */
        make_dir(tpl, NEWROOT "/proc", 0555);
        if (mount("/proc", NEWROOT "/proc", NULL, MS_BIND | MS_REC, NULL) < 0)
                tpl_fail(tpl, -errno, "proc", "cannot bind /proc: %m");

        if (chdir(NEWROOT) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
                tpl_fail(tpl, -errno, "pivot_root", "cannot switch to the new root: %m");
        if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
                tpl_fail(tpl, -errno, "pivot_root", "cannot detach the old root: %m");
        if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) <
            0)
                tpl_fail(tpl, -errno, "read-only root", "cannot make the root read-only: %m");
}
