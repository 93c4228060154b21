/* The template process: it builds the sandbox's namespaces and root, starts
 * the interpreter once, then forks a fresh copy of itself for every run.
 *
 * The host starts it by fork() and execve("/proc/self/exe") with argv[0]
 * TEMPLATE_ARGV0, so the template begins with a clean address space; a
 * constructor in this file catches that argv[0] before the program's main().
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/channel.h"
#include "config/limits.h"
#include "config/pythonpath.h"
#include "template/template.h"
#include "core/util.h"

#ifndef MS_NOSYMFOLLOW
#define MS_NOSYMFOLLOW 256
#endif
#ifndef MOUNT_ATTR_NOSYMFOLLOW
#define MOUNT_ATTR_NOSYMFOLLOW 0x00200000
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif

/* The new root is built on a tmpfs mounted over /tmp inside the template's
 * own mount namespace; the host's /tmp is not touched. */
#define NEWROOT "/tmp"

static int ctl_fd = TEMPLATE_CTL_FD;

/* pidfds of the copies this template started that may still live. The
 * copies are the host's children, but if the host dies (even by SIGKILL)
 * the template sees its control socket close and ends them, so no run
 * outlives its host. */
#define MAX_LIVE_COPIES 4096
static int live_copies[MAX_LIVE_COPIES];
static size_t n_live_copies;

/* Drops the copies whose pidfd polled readable (they exited): polled[i]
 * is the poll entry of live_copies[i]. Their cgroups are the host's to
 * remove, once it has read how the run ended. */
static void forget_exited_copies(const struct pollfd *polled)
{
        size_t k = 0;
        for (size_t i = 0; i < n_live_copies; i++) {
                if (polled[i].revents) {
                        close(live_copies[i]);
                        continue;
                }
                live_copies[k++] = live_copies[i];
        }
        n_live_copies = k;
}

_Noreturn static void host_gone(void)
{
        for (size_t i = 0; i < n_live_copies; i++)
                syscall(SYS_pidfd_send_signal, live_copies[i], SIGKILL, NULL, 0);
        _exit(0);
}

static char ctl_recv_byte(void);
static void copy_cgroup_done(uint32_t seq);
static void copy_cgroups_retry(void);

/* Waits for work: returns a message from the host, or 0 when a copy has
 * exited, which is when the requests a run left in the request socket are
 * due (see sandbox.c). The socket itself is not watched, so that asking
 * wakes nobody. The copies seen to have exited are forgotten here, from
 * the same poll. */
static char wait_for_work(void)
{
        static struct pollfd p[MAX_LIVE_COPIES + 1];
        for (;;) {
                nfds_t n = 0;
                p[n++] = (struct pollfd){ctl_fd, POLLIN, 0};
                for (size_t i = 0; i < n_live_copies; i++)
                        p[n++] = (struct pollfd){live_copies[i], POLLIN, 0};
                int k = poll(p, n, -1);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k > 0)
                        forget_exited_copies(p + 1);
                copy_cgroups_retry();
                if (k < 0 || p[0].revents)
                        return ctl_recv_byte();
                return 0;
        }
}

/* How many copies the host asked for in the request socket, read without
 * blocking; also the copies' cgroups the host is done with (REQ_DONE and
 * the cgroup's number, 4 bytes little-endian), which are removed. Only the
 * host holds its write end; a record may span two reads. */
static unsigned requested_copies(void)
{
        static int done_bytes = -1; /* bytes of a REQ_DONE number read so far */
        static uint32_t done_seq;
        unsigned want = 0;
        unsigned char buf[256];
        ssize_t n;
        while ((n = read(TEMPLATE_REQ_FD, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
                for (ssize_t i = 0; i < n; i++) {
                        if (done_bytes >= 0) {
                                done_seq |= (uint32_t)buf[i] << (8 * done_bytes);
                                if (++done_bytes == 4) {
                                        copy_cgroup_done(done_seq);
                                        done_bytes = -1;
                                }
                        } else if (buf[i] == REQ_DONE) {
                                done_bytes = 0;
                                done_seq = 0;
                        } else {
                                want += buf[i] == CTL_SPAWN;
                        }
                }
        }
        return want;
}
static template_params params;
/* Whether the interpreter has been warmed up (see template_main). */
static bool warmed_up;
static struct sock_fprog guest_filter;
static char tmp_opts[128], out_opts[128];

/* Reports a failure to the host ("E<errno> <feature>|<message>") and exits.
 * feature names the kernel feature or step, so `airlock run` can say what
 * is missing. */
_Noreturn static void fail(int err, const char *feature, const char *fmt, ...) _printf_(3, 4);
_Noreturn static void fail(int err, const char *feature, const char *fmt, ...)
{
        char msg[900], buf[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        int n =
            snprintf(buf, sizeof(buf), "%c%d %s|%s", CTL_ERROR, err < 0 ? -err : err, feature, msg);
        if (n > 0)
                (void)!send(ctl_fd, buf, (size_t)MIN(n, (int)sizeof(buf) - 1), MSG_NOSIGNAL);
        _exit(127);
}

static void ctl_send_byte(char c)
{
        if (send(ctl_fd, &c, 1, MSG_NOSIGNAL) != 1)
                _exit(127);
}

static char ctl_recv_byte(void)
{
        char c;
        ssize_t n;
        do
                n = recv(ctl_fd, &c, 1, 0);
        while (n < 0 && errno == EINTR);
        if (n != 1)
                host_gone();
        return c;
}

/* A NULL-terminated copy of a JSON array of strings from the host (a
 * non-string is ""), its length in *ret_n; NULL when out of memory. */
static char **string_array(json_t *a, size_t *ret_n)
{
        size_t n = json_array_size(a);
        char **v = calloc(n + 1, sizeof(char *));
        *ret_n = 0;
        for (size_t i = 0; v && i < n; i++)
                v[(*ret_n)++] = strdup(json_string_value(json_array_get(a, i)) ?: "");
        return v;
}

static void read_params(void)
{
        char *buf = malloc(65536);
        if (!buf)
                _exit(127);
        ssize_t n;
        do
                n = recv(ctl_fd, buf, 65536, 0);
        while (n < 0 && errno == EINTR);
        if (n <= 0)
                _exit(127);
        json_error_t jerr;
        json_t *j = json_loadb(buf, (size_t)n, 0, &jerr);
        free(buf);
        if (!j)
                fail(EINVAL, "setup", "bad parameters from the host");
        /* The limits the host sends (the limits table's template column);
         * the others keep their defaults. */
        airlock_limits_default(&params.limits);
        limits_from_json(&params.limits, j);
        params.has_input = json_is_true(json_object_get(j, "has_input"));
        params.input_tree = json_is_true(json_object_get(j, "input_tree"));
        params.guest_uid = (uid_t)json_integer_value(json_object_get(j, "guest_uid"));
        params.guest_gid = (gid_t)json_integer_value(json_object_get(j, "guest_gid"));
        params.cgroup = (int)json_integer_value(json_object_get(j, "cgroup"));
        params.auto_figures = !json_is_false(json_object_get(j, "auto_figures"));
        params.preloads = string_array(json_object_get(j, "preloads"), &params.n_preloads);
        json_t *py = json_object_get(j, "python_paths");
        json_t *py_fd = json_object_get(j, "python_path_fds");
        size_t n_py = MIN(json_array_size(py), (size_t)PYPATH_MAX);
        params.python_paths = calloc(n_py + 1, sizeof(char *));
        params.python_path_fd = calloc(n_py + 1, sizeof(bool));
        for (size_t i = 0; params.python_paths && params.python_path_fd && i < n_py; i++) {
                params.python_paths[i] = strdup(json_string_value(json_array_get(py, i)) ?: "");
                params.python_path_fd[i] = json_is_true(json_array_get(py_fd, i));
                params.n_python_paths++;
        }
        params.sys_path = string_array(json_object_get(j, "sys_path"), &params.n_sys_path);
        json_decref(j);
}

static void write_file(const char *path, const char *data)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 || al_write_full(fd, data, strlen(data)) < 0)
                fail(-errno, "mount namespace", "cannot write %s: %m", path);
        close(fd);
}

static void make_dir(const char *path, mode_t mode)
{
        if (mkdir(path, mode) < 0 && errno != EEXIST)
                fail(-errno, "mount namespace", "cannot create %s: %m", path);
}

/* Makes a mount read-only (and nosuid, nodev unless dev_ok) without
 * clearing flags the kernel locked when the mount crossed into our user
 * namespace. mount_setattr changes only the bits it is given. */
static int make_readonly(const char *path, bool dev_ok, bool noexec)
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

static void bind_ro(const char *src, const char *dst, bool dev_ok)
{
        if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
                fail(-errno, "bind mount", "cannot bind %s: %m", src);
        int r = make_readonly(dst, dev_ok, false);
        if (r < 0)
                fail(r, "read-only bind mount", "cannot make %s read-only: %s", dst, strerror(-r));
}

/* Mounts the staged input (TEMPLATE_INPUT_FD) read-only at NEWROOT/input.
 *
 * A bind mount would show the host's staging path in the guest's
 * /proc/self/mountinfo, as the root of the mount within its file system
 * ("/tmp/airlock-stage-XXXXXX/input"): the kernel prints a bind mount's root
 * relative to its superblock and nothing in a bind can change that. A
 * read-only overlay is a file system of its own, whose root is "/", and its
 * options name its layers only as given, here /proc/self/fd links. Its lower
 * layers are the staged tree and the empty mount point itself (an overlay
 * without an upper layer needs two); the root is made read-only later, so
 * that one stays empty. Nothing is copied: overlay reads the staged files in
 * place. redirect_dir=nofollow: no xattr on a layer can send a lookup
 * elsewhere. Kernels that refuse overlay in a user namespace (before 5.11)
 * get the bind mount, and then the staging path shows. */
#define INPUT_ATTACH NEWROOT "/.staged-input"

static void mount_input(void)
{
        /* As root, the host sends a detached copy of the staged tree
         * (open_tree), which this template, no longer root, could not
         * reach by path. Overlay takes layers only from this namespace, so
         * the copy is attached for the time the overlay is made, then
         * detached again: mountinfo shows no trace of it. */
        if (params.input_tree) {
                make_dir(INPUT_ATTACH, 0700);
                if (syscall(SYS_move_mount, TEMPLATE_INPUT_FD, "", AT_FDCWD, INPUT_ATTACH,
                            MOVE_MOUNT_F_EMPTY_PATH) < 0)
                        fail(-errno, "bind mount", "cannot attach the staged input: %m");
                int fd = open(INPUT_ATTACH, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd < 0 || dup2(fd, TEMPLATE_INPUT_FD) < 0)
                        fail(-errno, "bind mount", "cannot open the staged input: %m");
                close(fd);
        }
        int empty = open(NEWROOT "/input", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (empty < 0)
                fail(-errno, "mount namespace", "cannot open /input: %m");
        char opts[128];
        snprintf(opts, sizeof(opts),
                 "lowerdir=/proc/self/fd/%d:/proc/self/fd/%d,redirect_dir=nofollow",
                 TEMPLATE_INPUT_FD, empty);
        if (mount("airlock-input", NEWROOT "/input", "overlay",
                  MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) < 0) {
                if (errno != ENODEV && errno != EPERM && errno != EINVAL)
                        fail(-errno, "overlay mount", "cannot mount the staged input: %m");
                char src[64];
                snprintf(src, sizeof(src), "/proc/self/fd/%d", TEMPLATE_INPUT_FD);
                if (mount(src, NEWROOT "/input", NULL, MS_BIND | MS_REC, NULL) < 0)
                        fail(-errno, "bind mount", "cannot bind the staged input: %m");
        }
        close(empty);
        int r = make_readonly(NEWROOT "/input", false, true);
        if (r < 0)
                fail(r, "read-only bind mount", "cannot make /input read-only: %s", strerror(-r));
        if (params.input_tree && (umount2(INPUT_ATTACH, MNT_DETACH) < 0 || rmdir(INPUT_ATTACH) < 0))
                fail(-errno, "bind mount", "cannot detach the staged input: %m");
}

/* A top-level entry of the host root that Python needs: merged-/usr
 * symlinks are copied as symlinks, directories are bound read-only. */
static void add_system_entry(const char *name)
{
        char host[64], dst[96], target[256];
        snprintf(host, sizeof(host), "/%s", name);
        snprintf(dst, sizeof(dst), NEWROOT "/%s", name);
        struct stat st;
        if (lstat(host, &st) < 0)
                return;
        if (S_ISLNK(st.st_mode)) {
                ssize_t n = readlink(host, target, sizeof(target) - 1);
                if (n <= 0)
                        return;
                target[n] = '\0';
                if (symlink(target, dst) < 0)
                        fail(-errno, "mount namespace", "cannot create %s: %m", dst);
        } else if (S_ISDIR(st.st_mode)) {
                make_dir(dst, 0755);
                bind_ro(host, dst, false);
        }
}

static void bind_file(const char *host, const char *dst, bool dev)
{
        int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                fail(-errno, "mount namespace", "cannot create %s: %m", dst);
        close(fd);
        bind_ro(host, dst, dev);
}

/* A --python-path folder the host did not send as a mount (the host is
 * not root) is cloned here by its path, looked up with the guest's ids,
 * before the new root's tmpfs covers /tmp, where the folder may be. The
 * clone goes on the fd number the host's mount would have had. */
static void open_python_paths(void)
{
        for (size_t i = 0; i < params.n_python_paths; i++) {
                if (params.python_path_fd[i])
                        continue;
                const char *host = params.python_paths[i];
                int fd = (int)syscall(SYS_open_tree, AT_FDCWD, host, OPEN_TREE_CLONE | O_CLOEXEC);
                /* Mounts below it that came locked from the host's
                 * namespace cannot be left out. */
                if (fd < 0 && errno == EINVAL)
                        fd = (int)syscall(SYS_open_tree, AT_FDCWD, host,
                                          OPEN_TREE_CLONE | O_CLOEXEC | AT_RECURSIVE);
                if (fd < 0)
                        fail(-errno, "python-path",
                             "--python-path %s cannot be reached by the sandbox's user (uid %u "
                             "on the host): %m; make it and the folders above it readable and "
                             "searchable for that user",
                             host, (unsigned)params.guest_uid);
                if (dup3(fd, TEMPLATE_PYPATH_FD + (int)i, O_CLOEXEC) < 0)
                        fail(-errno, "bind mount", "cannot mount --python-path %s: %m", host);
                close(fd);
        }
}

/* Contract: mounts each --python-path folder N read-only, nosuid and nodev
 * at /opt/airlock/pythonpath/N of the new root, and nothing else of the
 * host: not the path that leads to it, not the mounts below it. A link in
 * the folder resolves in the guest's root, so it reaches only what the
 * guest sees anyway (/usr, /input, the other folders); that is why the
 * mount keeps following links, as packages need (lib.so -> lib.so.1). Not
 * noexec: C extensions are mapped executable. As root the host sends a
 * detached mount of the folder, idmapped so that its owner is the guest's
 * id; otherwise open_python_paths cloned it by its path, looked up with
 * the guest's ids. Either way a folder the guest could not read fails here,
 * naming it, rather than at the first import. */
static void mount_python_paths(void)
{
        if (!params.n_python_paths)
                return;
        make_dir(NEWROOT "/opt", 0755);
        make_dir(NEWROOT "/opt/airlock", 0755);
        make_dir(NEWROOT PYPATH_GUEST_DIR, 0755);
        for (size_t i = 0; i < params.n_python_paths; i++) {
                const char *host = params.python_paths[i];
                char dst[96];
                snprintf(dst, sizeof(dst), NEWROOT PYPATH_GUEST_DIR "/%zu", i);
                make_dir(dst, 0755);
                int fd = TEMPLATE_PYPATH_FD + (int)i;
                if (syscall(SYS_move_mount, fd, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                        fail(-errno, "bind mount", "cannot mount --python-path %s: %m", host);
                close(fd);
                struct mount_attr attr = {
                    .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                };
                if (syscall(SYS_mount_setattr, AT_FDCWD, dst, 0, &attr, sizeof(attr)) < 0 &&
                    (errno != ENOSYS ||
                     mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                           NULL) < 0))
                        fail(-errno, "read-only bind mount",
                             "cannot make --python-path %s read-only: %m", host);
                /* Reading as the guest will: the template's capabilities
                 * cover only files its own id owns, which the guest owns
                 * too. */
                int dir = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dir < 0 || faccessat(dir, ".", R_OK | X_OK, AT_EACCESS) < 0)
                        fail(-errno, "python-path",
                             "--python-path %s cannot be read by the sandbox's user (uid %u on "
                             "the host): %m; make it readable for that user",
                             host, (unsigned)params.guest_uid);
                close(dir);
        }
}

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

static void etc_copy_entry(etc_copy *st, int src_dir, int dst_dir, const char *rel_dir,
                           const char *name, int depth, bool only_libs);

static void etc_copy_file(etc_copy *st, int src_dir, int dst_dir, const char *name)
{
        _cleanup_close_ int in =
            openat(src_dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        struct stat sb;
        if (in < 0 || fstat(in, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size > ETC_MAX_FILE ||
            st->bytes + (size_t)sb.st_size > ETC_MAX_BYTES)
                return;
        _cleanup_close_ int out =
            openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (out < 0)
                fail(-errno, "mount namespace", "cannot create /etc/.../%s: %m", name);
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
                        fail(-errno, "mount namespace", "cannot write /etc/.../%s: %m", name);
                left -= (size_t)n;
        }
        st->bytes += (size_t)sb.st_size - left;
}

static void etc_copy_dir(etc_copy *st, int src_dir, int dst_dir, const char *rel, const char *name,
                         int depth, bool only_libs)
{
        int in = openat(src_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
                return;
        DIR *d = fdopendir(in);
        if (!d) {
                close(in);
                return;
        }
        if (mkdirat(dst_dir, name, 0755) < 0 && errno != EEXIST)
                fail(-errno, "mount namespace", "cannot create /%s: %m", rel);
        _cleanup_close_ int out =
            openat(dst_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (out < 0)
                fail(-errno, "mount namespace", "cannot open /%s: %m", rel);
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (only_libs && !strstr(de->d_name, ".so"))
                        continue;
                etc_copy_entry(st, dirfd(d), out, rel, de->d_name, depth + 1, false);
        }
        closedir(d);
}

/* Copies src_dir/name to dst_dir/name, whose path below the new root is
 * rel_dir/name: a regular file by content, a directory entry by entry, a
 * link as a link (checked later, in etc_check_links); anything else, and
 * anything past the caps, is left out. */
static void etc_copy_entry(etc_copy *st, int src_dir, int dst_dir, const char *rel_dir,
                           const char *name, int depth, bool only_libs)
{
        struct stat sb;
        char rel[512];
        int n = snprintf(rel, sizeof(rel), "%s/%s", rel_dir, name);
        if (n < 0 || (size_t)n >= sizeof(rel) || st->entries >= ETC_MAX_ENTRIES ||
            fstatat(src_dir, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
                return;
        st->entries++;
        if (S_ISREG(sb.st_mode)) {
                etc_copy_file(st, src_dir, dst_dir, name);
        } else if (S_ISDIR(sb.st_mode) && depth < ETC_MAX_DEPTH) {
                etc_copy_dir(st, src_dir, dst_dir, rel, name, depth, only_libs);
        } else if (S_ISLNK(sb.st_mode) && st->n_links < ETC_MAX_ENTRIES) {
                char target[1024];
                ssize_t k = readlinkat(src_dir, name, target, sizeof(target));
                if (k <= 0 || (size_t)k >= sizeof(target))
                        return;
                target[k] = '\0';
                if (symlinkat(target, dst_dir, name) < 0)
                        fail(-errno, "mount namespace", "cannot create /%s: %m", rel);
                st->links[st->n_links] = strdup(rel);
                if (!st->links[st->n_links])
                        fail(-ENOMEM, "mount namespace", "out of memory");
                st->n_links++;
        }
}

/* Whether the link at rel (below the new root) resolves, inside that root,
 * to a file on one of the exposed file systems. The kernel resolves every
 * component and every link on the way as the guest will, confined to the
 * root; the answer is about the inode reached, not about a path. */
static bool etc_link_stays_inside(const etc_copy *st, const char *rel)
{
        struct open_how how = {
            .flags = O_PATH | O_CLOEXEC,
            .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
        _cleanup_close_ int fd = (int)syscall(SYS_openat2, st->root_fd, rel, &how, sizeof(how));
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) < 0)
                return false;
        for (size_t i = 0; i < st->n_devs; i++)
                if (sb.st_dev == st->devs[i])
                        return true;
        return false;
}

/* Removes every copied link that does not stay inside. Where openat2 is
 * missing (before Linux 5.6), nothing can be checked, and every link
 * goes. Removing one link can make another dangle, which is harmless: a
 * dangling link reaches nothing. */
static void etc_check_links(etc_copy *st)
{
        for (size_t i = 0; i < st->n_links; i++) {
                if (!etc_link_stays_inside(st, st->links[i]) &&
                    unlinkat(st->root_fd, st->links[i], 0) < 0)
                        fail(-errno, "mount namespace", "cannot remove /%s: %m", st->links[i]);
                free(st->links[i]);
        }
        st->n_links = 0;
}

/* The guest's /etc: the few files airlock writes itself, then the copies
 * of etc_exposed. Runs after the system directories are bound into the
 * new root, whose file systems the copied links may reach. */
static void build_etc(void)
{
        make_dir(NEWROOT "/etc", 0755);
        write_file(NEWROOT "/etc/passwd", "root:x:0:0:sandbox:/tmp:/bin/sh\n"
                                          "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n");
        write_file(NEWROOT "/etc/group", "root:x:0:\nnogroup:x:65534:\n");
        write_file(NEWROOT "/etc/hosts", "127.0.0.1 localhost airlock\n::1 localhost\n");
        write_file(NEWROOT "/etc/hostname", "airlock\n");
        write_file(NEWROOT "/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n");

        /* The copying runs in a child: its allocations (directory
         * streams, link names) would otherwise stay in the template's heap
         * as holes, which every copy inherits and the page-learning probe
         * must cover (in measurements, this alone made a fresh run of
         * print(1) 0.4 ms slower). The child works in the same mount
         * namespace and reports a failure to the host itself. */
        pid_t pid = fork();
        if (pid < 0)
                fail(-errno, "mount namespace", "cannot fork to copy /etc: %m");
        if (pid > 0) {
                int status = 0;
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                        ;
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        _exit(127);
                return;
        }
        static etc_copy st;
        st.root_fd = open(NEWROOT, O_PATH | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int host_etc =
            open("/etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        _cleanup_close_ int guest_etc =
            open(NEWROOT "/etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (st.root_fd < 0 || guest_etc < 0)
                fail(-errno, "mount namespace", "cannot open the new root: %m");
        if (host_etc < 0)
                _exit(0);
        /* The file systems a link may reach: the root's tmpfs and each
         * system directory bound into it. */
        static const char *const roots[] = {".",   "usr",   "bin",   "sbin",
                                            "lib", "lib64", "lib32", "libx32"};
        for (size_t i = 0; i < ARRAY_SIZE(roots); i++) {
                struct stat sb;
                if (fstatat(st.root_fd, roots[i], &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISDIR(sb.st_mode) && st.n_devs < ARRAY_SIZE(st.devs))
                        st.devs[st.n_devs++] = sb.st_dev;
        }
        for (size_t i = 0; i < ARRAY_SIZE(etc_exposed); i++)
                etc_copy_entry(&st, host_etc, guest_etc, "etc", etc_exposed[i], 0,
                               strcmp(etc_exposed[i], "alternatives") == 0);
        etc_check_links(&st);
        _exit(0);
}

/* The template's cache directory, GUEST_CACHE_DIR: a tmpfs of its own,
 * writable only while the template fills it (matplotlib's font list, see
 * guest_start_cache_builder) and read-only to every guest. The guest's
 * /tmp is fresh in every run, so a cache kept there would be rebuilt by
 * every run that imports matplotlib, about a second each here. */
#define CACHE_TMPFS_OPTS "size=16m,nr_inodes=4096,mode=0755"
static pid_t cache_builder; /* 0 until it is started, then its pid (or < 0) */
static bool cache_sealed;

static void make_cache_dir(void)
{
        make_dir(NEWROOT GUEST_CACHE_DIR, 0755);
        if (mount("tmpfs", NEWROOT GUEST_CACHE_DIR, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  CACHE_TMPFS_OPTS) < 0)
                fail(-errno, "tmpfs", "cannot mount the cache tmpfs: %m");
}

/* Once the cache builder has exited (or could not start), the cache
 * becomes read-only for the template, and so for every copy made from
 * then on. Copies made before make their own view of it read-only
 * (copy_main). */
static void settle_cache(void)
{
        if (cache_sealed || cache_builder == 0)
                return;
        if (cache_builder > 0) {
                pid_t w;
                while ((w = waitpid(cache_builder, NULL, WNOHANG)) < 0 && errno == EINTR)
                        ;
                if (w == 0)
                        return;
        }
        int r = make_readonly(GUEST_CACHE_DIR, false, true);
        if (r < 0)
                fail(r, "read-only bind mount", "cannot make %s read-only: %s", GUEST_CACHE_DIR,
                     strerror(-r));
        cache_sealed = true;
}

/* Builds the guest's root: a read-only tmpfs holding /usr (and the merged
 * links), a minimal /etc, a minimal /dev, /input, and mount points for the
 * per-copy /output, /tmp and /proc. No other host path is reachable. */
static void build_root(void)
{
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                fail(-errno, "mount namespace", "cannot make mounts private: %m");
        open_python_paths();
        if (mount("tmpfs", NEWROOT, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0755") < 0)
                fail(-errno, "tmpfs", "cannot mount the root tmpfs: %m");

        static const char *const sys_entries[] = {"usr",   "bin",   "sbin",  "lib",
                                                  "lib64", "lib32", "libx32"};
        for (size_t i = 0; i < ARRAY_SIZE(sys_entries); i++)
                add_system_entry(sys_entries[i]);

        build_etc();
        make_cache_dir();

        make_dir(NEWROOT "/dev", 0755);
        static const char *const devs[] = {"null", "zero", "full", "random", "urandom"};
        for (size_t i = 0; i < ARRAY_SIZE(devs); i++) {
                /* A shared mapping of /dev/zero is shared memory that no
                 * rlimit counts: without a cgroup to charge it to, the
                 * guest has no /dev/zero. */
                if (!params.cgroup && strcmp(devs[i], "zero") == 0)
                        continue;
                char host[32], dst[64];
                snprintf(host, sizeof(host), "/dev/%s", devs[i]);
                snprintf(dst, sizeof(dst), NEWROOT "/dev/%s", devs[i]);
                bind_file(host, dst, true);
        }
        if (symlink("/proc/self/fd", NEWROOT "/dev/fd") < 0 ||
            symlink("/proc/self/fd/0", NEWROOT "/dev/stdin") < 0 ||
            symlink("/proc/self/fd/1", NEWROOT "/dev/stdout") < 0 ||
            symlink("/proc/self/fd/2", NEWROOT "/dev/stderr") < 0)
                fail(-errno, "mount namespace", "cannot create /dev links: %m");

        make_dir(NEWROOT "/input", 0755);
        if (params.has_input)
                mount_input();
        close(TEMPLATE_INPUT_FD);
        make_dir(NEWROOT "/output", 0755);
        make_dir(NEWROOT "/tmp", 01777);
        mount_python_paths();

        /* Each copy mounts its own procfs. The kernel allows that in a user
         * namespace only while a fully visible procfs is mounted in the
         * mount namespace, so the host's stays under the copy's new one;
         * it is covered before any guest code runs. */
        make_dir(NEWROOT "/proc", 0555);
        if (mount("/proc", NEWROOT "/proc", NULL, MS_BIND | MS_REC, NULL) < 0)
                fail(-errno, "proc", "cannot bind /proc: %m");

        if (chdir(NEWROOT) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
                fail(-errno, "pivot_root", "cannot switch to the new root: %m");
        if (umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
                fail(-errno, "pivot_root", "cannot detach the old root: %m");
        if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) <
            0)
                fail(-errno, "read-only root", "cannot make the root read-only: %m");
}

/* The staged input fd came from the host's mount namespace, and the kernel
 * binds only mounts of the caller's own namespace. Open the same directory
 * again in ours, while we still have the host's ids (the staging directory
 * is private to them), and keep it only if it is the very same inode. */
static void reopen_input(void)
{
        char link[64], path[4096];
        snprintf(link, sizeof(link), "/proc/self/fd/%d", TEMPLATE_INPUT_FD);
        ssize_t n = readlink(link, path, sizeof(path) - 1);
        if (n <= 0 || path[0] != '/')
                fail(-EINVAL, "bind mount", "cannot locate the staged input");
        path[n] = '\0';
        struct stat a, b;
        int fd = open(path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &a) < 0 || fstat(TEMPLATE_INPUT_FD, &b) < 0)
                fail(-errno, "bind mount", "cannot reopen the staged input %s: %m", path);
        if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
                fail(-EXDEV, "bind mount", "the staged input %s was replaced", path);
        if (dup2(fd, TEMPLATE_INPUT_FD) < 0)
                fail(-errno, "bind mount", "cannot reopen the staged input: %m");
        close(fd);
}

/* Contract: started by root, the template becomes the unprivileged guest
 * ids in the host's user namespace BEFORE it creates the sandbox's user
 * namespace. The kernel charges what a user namespace's processes own
 * (inotify instances and watches, queued signals, message queue bytes,
 * processes) to the namespace's creator at every level above it; created
 * by root, a guest could exhaust root's own quotas. Created by the guest
 * ids, the charges above the sandbox fall on those ids. */
static void drop_to_guest_ids(void)
{
        if (geteuid() != 0 || params.guest_uid == 0)
                return;
        if (setgroups(0, NULL) < 0 ||
            setresgid(params.guest_gid, params.guest_gid, params.guest_gid) < 0 ||
            setresuid(params.guest_uid, params.guest_uid, params.guest_uid) < 0)
                fail(-errno, "user namespaces", "cannot switch to the guest ids %u:%u: %m",
                     (unsigned)params.guest_uid, (unsigned)params.guest_gid);
}

static void setup_namespaces(void)
{
        drop_to_guest_ids();
        if (unshare(CLONE_NEWUSER) < 0)
                fail(-errno, "user namespaces",
                     "cannot create a user namespace: %m (is kernel.unprivileged_userns_clone or "
                     "user.max_user_namespaces 0?)");
        ctl_send_byte(CTL_USERNS);
        if (ctl_recv_byte() != CTL_GO)
                _exit(127);
        if (unshare(CLONE_NEWNS) < 0)
                fail(-errno, "mount namespaces", "cannot create a mount namespace: %m");
        if (params.has_input && !params.input_tree)
                reopen_input();
        /* The host mapped uid and gid 0 to an unprivileged host id; become it. */
        if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
                fail(-errno, "user namespaces", "cannot switch to the mapped ids: %m");
        if (unshare(CLONE_NEWNET) < 0)
                fail(-errno, "network namespaces", "cannot create a network namespace: %m");
        if (unshare(CLONE_NEWIPC) < 0)
                fail(-errno, "IPC namespaces", "cannot create an IPC namespace: %m");
        if (unshare(CLONE_NEWUTS) < 0)
                fail(-errno, "UTS namespaces", "cannot create a UTS namespace: %m");
        /* The cgroup namespace is each copy's own, made once the copy is in
         * its own cgroup (copy_main), so that it sees only that. */
        if (sethostname("airlock", 7) < 0)
                fail(-errno, "UTS namespaces", "cannot set the host name: %m");
        build_root();
}

static void set_limit(int resource, rlim_t value)
{
        struct rlimit rl = {value, value};
        if (setrlimit(resource, &rl) < 0) {
                /* Never raise past the hard limit we were given. */
                struct rlimit cur;
                if (getrlimit(resource, &cur) == 0 && cur.rlim_max < value) {
                        rl.rlim_cur = rl.rlim_max = cur.rlim_max;
                        setrlimit(resource, &rl);
                }
        }
}

/* Drops every capability for good: the bounding set (so no execve can
 * regain any, even as uid 0 of the namespace), the ambient set, and the
 * effective, permitted and inheritable sets. */
static int drop_capabilities(void)
{
        /* EINVAL marks the first capability this kernel does not know:
         * every one below it has been dropped. */
        for (int cap = 0; cap <= 63; cap++) {
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0)
                        continue;
                if (errno == EINVAL && cap > 0)
                        break;
                return -errno;
        }
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
                return -errno;
        struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct data[2];
        memset(data, 0, sizeof(data));
        if (syscall(SYS_capset, &hdr, data) < 0)
                return -errno;
        return 0;
}

/* Sends the tag, then text (may be NULL), with fds attached. */
static int send_fds(int sock, char tag, const char *text, const int *fds, size_t n)
{
        char cbuf[CMSG_SPACE(sizeof(int) * 8)];
        memset(cbuf, 0, sizeof(cbuf));
        size_t tlen = text ? strlen(text) : 0;
        struct iovec iov[2] = {{&tag, 1}, {(void *)text, tlen}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = tlen ? 2 : 1};
        if (n) {
                mh.msg_control = cbuf;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int) * n);
                memcpy(CMSG_DATA(cm), fds, sizeof(int) * n);
        }
        ssize_t w = sendmsg(sock, &mh, MSG_NOSIGNAL);
        return w == (ssize_t)(1 + tlen) ? 0 : w < 0 ? -errno : -EIO;
}

_Noreturn static void copy_fail(int chan, const char *fmt, ...) _printf_(2, 3);
_Noreturn static void copy_fail(int chan, const char *fmt, ...)
{
        char buf[512];
        buf[0] = COPY_ERROR;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf + 1, sizeof(buf) - 1, fmt, ap);
        va_end(ap);
        if (n > 0)
                (void)!send(chan, buf, 1 + (size_t)MIN(n, (int)sizeof(buf) - 2), MSG_NOSIGNAL);
        _exit(126);
}

/* Sends one JSON frame, or ends this process if the host is gone. */
static void reply(int chan, json_t *msg)
{
        if (!msg || channel_send(chan, msg) < 0)
                _exit(0);
        json_decref(msg);
}

/* A new active session process announces itself with a pidfd of itself, so
 * the host notices at once when the state it talks to has died. */
static void announce_active(int chan, const char *op)
{
        int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
        if (self < 0 || send_fds(chan, COPY_ACTIVE, NULL, &self, 1) < 0)
                _exit(0);
        close(self);
        reply(chan, json_pack("{s:s}", WIRE_KEY_OP, op));
}

/* The session's reap pipe, inherited by every process of a session: pid 1
 * writes a byte into it each time it has
 * reaped something, so that a process waiting for others to be gone can
 * sleep until the set of processes changed (see wait_until_gone). A guest
 * can only write false wake-ups into it, or close it, which makes its own
 * session's restore fail rather than wait. */
static int reap_wait = -1;   /* the read end */
static int reap_notify = -1; /* the write end, pid 1's */

static pid_t fork_interpreter(void)
{
        guest_before_fork();
        pid_t pid = fork();
        if (pid == 0)
                guest_after_fork_child(COPY_CHANNEL_FD);
        else
                guest_after_fork_parent();
        return pid;
}

/* The session's pid 1 after it has handed the interpreter to its first
 * active process: it reaps, and it watches the channel without reading it.
 * When the host closes its end (session closed, or the host died), pid 1
 * exits, and with it every process of the session's PID namespace, the
 * frozen snapshots included. */
static void on_sigchld(int sig)
{
        (void)sig;
}

_Noreturn static void session_root(int chan)
{
        /* SIGCHLD stays blocked except inside ppoll, so a child's exit
         * interrupts the wait at once and no zombie lingers in /proc. */
        struct sigaction sa = {.sa_handler = on_sigchld};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGCHLD, &sa, NULL);
        sigset_t chld, open_mask;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, &open_mask);
        sigdelset(&open_mask, SIGCHLD);
        for (;;) {
                bool reaped = false;
                while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
                        reaped = true;
                if (reaped)
                        (void)!write(reap_notify, "r", 1);
                struct pollfd p = {chan, POLLRDHUP, 0};
                if (ppoll(&p, 1, NULL, &open_mask) > 0 &&
                    (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                        _exit(0);
        }
}

/* Whether pid is one of the session's processes that a restore keeps. */
static bool kept_pid(pid_t pid, json_t *keep)
{
        size_t i;
        json_t *v;
        if (pid <= 1 || pid == getpid())
                return true;
        json_array_foreach (keep, i, v)
                if (json_integer_value(v) == pid)
                        return true;
        return false;
}

/* Contract: returns 0 once no process of the session is left but pid 1,
 * this one, and those in keep (NULL: only `only` is waited for, if > 0),
 * every other one having been killed with kill_them and REAPED, so that
 * nothing of it is left even in /proc. It sleeps between checks until pid
 * 1 reaps something or a child of this process exits, never on a timer;
 * -ETIMEDOUT after SESSION_GONE_S if something will not go. */
#define SESSION_GONE_S 10
static int wait_until_gone(json_t *keep, pid_t only, bool kill_them)
{
        struct sigaction sa = {.sa_handler = on_sigchld}, old_sa;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGCHLD, &sa, &old_sa);
        sigset_t chld, old_mask, open_mask;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, &old_mask);
        open_mask = old_mask;
        sigdelset(&open_mask, SIGCHLD);
        uint64_t deadline = al_now_ns() + SESSION_GONE_S * 1000000000ull;
        int r = -ETIMEDOUT;
        while (al_now_ns() < deadline) {
                /* Our own killed children are ours to reap. */
                while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
                        ;
                char buf[64];
                while (read(reap_wait, buf, sizeof(buf)) > 0)
                        ;
                int left = 0;
                if (only > 0) {
                        left = kill(only, 0) == 0 || errno != ESRCH;
                } else {
                        DIR *d = opendir("/proc");
                        if (!d) {
                                r = -errno;
                                break;
                        }
                        struct dirent *de;
                        while ((de = readdir(d))) {
                                pid_t pid = (pid_t)atoi(de->d_name);
                                if (pid <= 0 || kept_pid(pid, keep))
                                        continue;
                                left++;
                                if (kill_them)
                                        kill(pid, SIGKILL);
                        }
                        closedir(d);
                }
                if (!left) {
                        r = 0;
                        break;
                }
                uint64_t now = al_now_ns();
                struct timespec ts = {.tv_sec = (time_t)((deadline - now) / 1000000000ull),
                                      .tv_nsec = (long)((deadline - now) % 1000000000ull)};
                struct pollfd p = {reap_wait, POLLIN, 0};
                if (ppoll(&p, 1, &ts, &open_mask) > 0 && (p.revents & (POLLERR | POLLNVAL))) {
                        r = -EBADF;
                        break;
                }
        }
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
        sigaction(SIGCHLD, &old_sa, NULL);
        return r;
}

/* Waits until the killed process pid is reaped (by this process when it is
 * its child, else by pid 1), so that a dropped snapshot is gone from /proc
 * before the next request is served, for at most SESSION_GONE_S. Reaps
 * nothing else: the guest's own children stay the guest's. */
static void wait_reaped(pid_t pid)
{
        /* Our own child (the base this process forked): reaped here. */
        pid_t w;
        while ((w = waitpid(pid, NULL, __WALL)) < 0 && errno == EINTR)
                ;
        if (w == pid)
                return;
        uint64_t deadline = al_now_ns() + SESSION_GONE_S * 1000000000ull;
        while (al_now_ns() < deadline) {
                /* The pipe is emptied before the check, so that a reap
                 * after the check still wakes the poll. */
                char buf[64];
                while (read(reap_wait, buf, sizeof(buf)) > 0)
                        ;
                if (kill(pid, 0) < 0 && errno == ESRCH)
                        return;
                struct pollfd p = {reap_wait, POLLIN, 0};
                if (poll(&p, 1, 10) > 0 && (p.revents & (POLLERR | POLLNVAL | POLLHUP)))
                        return;
        }
}

/* Contract: runs in the new active process of a rollback that the host
 * started (the old active process is dead, killed by the host after a
 * failed, timed-out or cancelled cell). Whatever the dead process left
 * unread on the channel is discarded, which leaves the stream at a frame
 * boundary even if the host stopped in the middle of a reply; then it asks
 * the host which snapshots to keep, ends and reaps every other process of
 * the session (the old state's children), and returns. Ends this process
 * (the host sees the session end) when any step fails. */
static void host_rollback(int chan)
{
        char junk[4096];
        while (recv(chan, junk, sizeof(junk), MSG_DONTWAIT) > 0)
                ;
        reply(chan, json_pack("{s:s}", WIRE_KEY_OP, WIRE_OP_RESTORE));
        frame_reader fr;
        frame_reader_init(&fr, CHANNEL_MAX_FRAME);
        json_t *msg = NULL;
        if (frame_reader_feed(&fr, chan, &msg) != 1)
                _exit(0);
        frame_reader_free(&fr);
        const char *op = json_string_value(json_object_get(msg, WIRE_KEY_OP));
        json_t *keep = json_object_get(msg, WIRE_KEY_KEEP);
        if (!op || strcmp(op, WIRE_OP_RESTORE) != 0 || !json_is_array(keep) ||
            wait_until_gone(keep, 0, true) < 0)
                _exit(0);
        json_decref(msg);
}

/* A snapshot: a frozen copy of the interpreter at the moment it was taken.
 * It sleeps until a restore wakes it (SIGUSR1, blocked since before the
 * fork), then starts the new active process and sleeps again, so the same
 * snapshot can be restored any number of times. Returns in the new active
 * process, once the old active process (the sender of SIGUSR1) is gone.
 *
 * The new active process is made with CLONE_PARENT: a child of the
 * snapshot's parent, never of the snapshot, which never reaps. So every
 * process a session ends is reaped by pid 1 in the end, and none lingers
 * as a zombie of a sleeping snapshot. */
static void snapshot_wait(int chan)
{
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        for (;;) {
                siginfo_t si;
                if (sigwaitinfo(&set, &si) < 0)
                        continue;
                /* A signal from outside the session's PID namespace (si_pid
                 * 0) is the host rolling a failed cell back: the old active
                 * process is already dead, so the new one ends the rest of
                 * the old state itself (see host_rollback). */
                bool from_host = si.si_pid == 0;
                /* Plain clone: the guest's seccomp filter, in force here,
                 * refuses clone3. With CLONE_PARENT the child's exit signal
                 * is the snapshot's own, SIGCHLD. */
                guest_before_fork();
                long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, NULL, NULL, NULL, 0);
                if (pid == 0) {
                        guest_after_fork_child(COPY_CHANNEL_FD);
                        sigprocmask(SIG_UNBLOCK, &set, NULL);
                        if (from_host) {
                                host_rollback(chan);
                                return;
                        }
                        if (wait_until_gone(NULL, si.si_pid, false) < 0)
                                _exit(0); /* the host sees the session end */
                        return;
                }
                guest_after_fork_parent();
        }
}

/* The number of threads of this process, from /proc/self/stat (field 20),
 * or -1 when it cannot be read. */
static int own_threads(void)
{
        int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        char buf[1024];
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return -1;
        buf[n] = '\0';
        /* The name (field 2) may hold spaces and parentheses: count fields
         * from its closing parenthesis, after which field 3 starts. */
        char *p = strrchr(buf, ')');
        for (int field = 2; p && field < 20; field++)
                p = strchr(p + 1, ' ');
        return p ? atoi(p + 1) : -1;
}

/* Contract: called in a single run's copy, pid 1 of its PID namespace,
 * after the guest's code has returned. Kills every other process of the
 * namespace and reaps them all, then tells whether this process is left
 * alone with a single thread. Only then can nothing of the guest's write
 * to /output or the output pipes any more, and the host may capture at
 * once rather than wait for this process's exit, which tears down the
 * whole interpreter. A guest that fakes the answer (it owns this
 * process's memory) only races its own capture, which is safe against
 * concurrent writers by design. */
static bool end_run_alone(void)
{
        /* As pid 1, kill(-1) reaches every other process of the namespace;
         * orphans are re-parented to us, so reaping until ECHILD collects
         * them all. Repeat until nothing is left to signal. */
        for (int pass = 0; pass < 100; pass++) {
                /* No child at all means no other process: orphans would be
                 * ours. This is one cheap call, where kill(-1) walks every
                 * process of the machine. */
                if (waitpid(-1, NULL, WNOHANG | __WALL) < 0 && errno == ECHILD)
                        return own_threads() == 1;
                if (kill(-1, SIGKILL) < 0 && errno == ESRCH)
                        return own_threads() == 1;
                for (;;) {
                        pid_t w = waitpid(-1, NULL, __WALL);
                        if (w < 0 && errno != EINTR)
                                break;
                }
        }
        return false;
}

/* The "end" frame of a single run, the agent's or a pre-warm one. */
static json_t *end_frame(const char *status, int exit_code, bool alone)
{
        return json_pack("{s:s, s:s, s:i, s:b}", WIRE_KEY_OP, WIRE_OP_END, WIRE_KEY_STATUS, status,
                         WIRE_KEY_EXIT_CODE, exit_code, WIRE_KEY_ALONE, alone);
}

/* Copies are prepared at idle priority: the fork, the interpreter's
 * after-fork work and the pre-warm run take some 10 ms of CPU here, and at
 * normal priority they would delay whatever the host and its caller do
 * meanwhile (an MCP client waiting for its answer, say). A host that finds
 * no copy ready raises the template or the copy back to normal priority,
 * which an unprivileged process may do for its own processes at nice 0,
 * so a busy machine cannot starve a run of its copy. */
static void set_policy(int policy)
{
        struct sched_param sp = {0};
        (void)sched_setscheduler(0, policy, &sp);
}

static void populate_learned(void);

/* The copy's loop: one run and exit, or, once the host opens a session,
 * runs, snapshots and restores until the host closes it. */
_Noreturn static void serve_host(int chan)
{
        bool session = false, first = true;
        frame_reader fr;
        frame_reader_init(&fr, CHANNEL_MAX_FRAME);
        for (;;) {
                json_t *msg = NULL;
                if (frame_reader_feed(&fr, chan, &msg) != 1)
                        _exit(0); /* the host is gone or closed this copy */
                /* Prepared at idle priority; the host's work runs at normal
                 * priority. */
                if (first)
                        set_policy(SCHED_OTHER);
                first = false;
                const char *op = json_string_value(json_object_get(msg, WIRE_KEY_OP));
                op = op ? op : "";
                if (strcmp(op, WIRE_OP_RUN) == 0) {
                        json_t *jc = json_object_get(msg, WIRE_KEY_CODE);
                        const char *code = json_string_value(jc);
                        const char *status = WIRE_STATUS_ERROR;
                        int exit_code =
                            code ? guest_run(code, json_string_length(jc), true, &status) : 1;
                        if (session) {
                                reply(chan, json_pack("{s:s, s:s, s:i}", WIRE_KEY_OP, WIRE_OP_END,
                                                      WIRE_KEY_STATUS, status, WIRE_KEY_EXIT_CODE,
                                                      exit_code));
                                json_decref(msg);
                                continue;
                        }
                        /* A single run: when nothing else of the run is
                         * left, close the output pipes and say so, so that
                         * the host captures at once; otherwise the host
                         * waits for the exit, which ends the rest. */
                        bool alone = end_run_alone();
                        if (alone)
                                syscall(SYS_close_range, 1, 2, 0);
                        reply(chan, end_frame(status, exit_code, alone));
                        /* The exit tears down a whole interpreter, a
                         * millisecond or more of CPU here. Alone, nobody
                         * waits for it, so it runs at idle priority and
                         * does not delay the host's capture and answer. */
                        if (alone)
                                set_policy(SCHED_IDLE);
                        _exit(exit_code & 0xff);
                } else if (strcmp(op, WIRE_OP_SESSION) == 0 && !session) {
                        int rp[2];
                        if (pipe2(rp, O_NONBLOCK | O_CLOEXEC) < 0)
                                _exit(1);
                        reap_wait = rp[0];
                        reap_notify = rp[1];
                        pid_t pid = fork_interpreter();
                        if (pid < 0)
                                _exit(1);
                        if (pid > 0)
                                session_root(chan);
                        close(reap_notify);
                        reap_notify = -1;
                        session = true;
                        guest_set_session();
                        announce_active(chan, WIRE_OP_SESSION);
                } else if (strcmp(op, WIRE_OP_SNAPSHOT) == 0 && session) {
                        sigset_t set, old;
                        sigemptyset(&set);
                        sigaddset(&set, SIGUSR1);
                        sigprocmask(SIG_BLOCK, &set, &old);
                        pid_t pid = fork_interpreter();
                        if (pid == 0) {
                                snapshot_wait(chan);
                                announce_active(chan, WIRE_OP_RESTORED);
                        } else {
                                sigprocmask(SIG_SETMASK, &old, NULL);
                                /* A pidfd of the snapshot comes first, so
                                 * that the host can wake it when this
                                 * process is dead (a rollback). */
                                int e = errno;
                                int sfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
                                if (pid > 0 && sfd < 0) {
                                        e = errno;
                                        kill(pid, SIGKILL);
                                }
                                if (send_fds(chan, COPY_SNAPSHOT, NULL, &sfd, sfd >= 0) < 0)
                                        _exit(0);
                                if (sfd >= 0)
                                        close(sfd);
                                if (sfd < 0)
                                        reply(chan,
                                              json_pack("{s:s, s:s}", WIRE_KEY_OP, WIRE_OP_ERROR,
                                                        WIRE_KEY_ERROR, strerror(e)));
                                else
                                        reply(chan,
                                              json_pack("{s:s, s:i}", WIRE_KEY_OP, WIRE_OP_SNAPSHOT,
                                                        WIRE_KEY_ID, (int)pid));
                                /* The fork made every page copy-on-write
                                 * again. The pages a run writes are copied
                                 * now, while the host is busy with the
                                 * last result, at a quarter of a fault's
                                 * cost each, rather than one fault at a
                                 * time in the next cell. */
                                if (sfd >= 0)
                                        populate_learned();
                        }
                } else if (strcmp(op, WIRE_OP_RESTORE) == 0 && session) {
                        pid_t id = (pid_t)json_integer_value(json_object_get(msg, WIRE_KEY_ID));
                        /* The old state's processes are ended and
                         * reaped before the snapshot is woken, and the new
                         * active process waits for this one to be gone
                         * before it announces itself: the host's restore
                         * returns only then. */
                        json_t *keep = json_object_get(msg, WIRE_KEY_KEEP);
                        if (id > 1 && kept_pid(id, keep) && wait_until_gone(keep, 0, true) == 0 &&
                            kill(id, SIGUSR1) == 0)
                                _exit(0);
                        reply(chan, json_pack("{s:s, s:s}", WIRE_KEY_OP, WIRE_OP_ERROR,
                                              WIRE_KEY_ERROR, "the snapshot is gone"));
                } else if (strcmp(op, WIRE_OP_DROP) == 0 && session) {
                        pid_t id = (pid_t)json_integer_value(json_object_get(msg, WIRE_KEY_ID));
                        if (id > 1 && id != getpid() && kill(id, SIGKILL) == 0)
                                wait_reaped(id);
                }
                json_decref(msg);
        }
}

/* How many times a copy goes through a run before it reports ready. The
 * second pass reuses what the first allocated and freed, as the agent's
 * run will: in ten alternating pairs of bench/bench_sandbox runs here, a
 * second pass made every pair faster, the median of a fresh run going
 * from 1.01-1.58 ms to 0.83-1.11 ms, for about 3 ms more of the copy's
 * idle-priority preparation. */
#define PREWARM_PASSES 2

/* Warms a copy before it is needed by going through a whole single run
 * once, with the output going to /dev/null: reading the "run" frame from a
 * channel, running print(1), ending the run's processes and writing the
 * "end" frame. On this kind of machine the first touch of each page in a
 * new process costs microseconds (more for a copy-on-write fault), so
 * every page the agent's run will touch is best touched here, off the
 * critical path. */
static void prewarm_copy(void)
{
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        int saved_out = fcntl(1, F_DUPFD_CLOEXEC, 3), saved_err = fcntl(2, F_DUPFD_CLOEXEC, 3);
        int sv[2] = {-1, -1};
        if (null < 0 || saved_out < 0 || saved_err < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 ||
            socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                goto out;
        /* Then the common paths of preloaded numpy and pandas, if any
         * (runtime._prewarm): their pages are written by a copy here, at
         * idle priority, and learned by the probe, not by the agent's run. */
        json_t *msg =
            json_pack("{s:s, s:s}", WIRE_KEY_OP, WIRE_OP_RUN, WIRE_KEY_CODE,
                      "print(1)\nimport sys\nsys.modules['_airlock_runtime']._prewarm()\n");
        int r = msg ? channel_send(sv[0], msg) : -ENOMEM;
        json_decref(msg);
        msg = NULL;
        frame_reader fr;
        frame_reader_init(&fr, CHANNEL_MAX_FRAME);
        if (r >= 0 && frame_reader_feed(&fr, sv[1], &msg) == 1) {
                json_t *jc = json_object_get(msg, WIRE_KEY_CODE);
                const char *status = WIRE_STATUS_ERROR;
                int exit_code =
                    guest_run(json_string_value(jc), json_string_length(jc), false, &status);
                json_t *end = end_frame(status, exit_code, end_run_alone());
                if (end)
                        (void)channel_send(sv[1], end);
                json_decref(end);
        }
        json_decref(msg);
        frame_reader_free(&fr);
out:
        if (saved_out >= 0)
                dup2(saved_out, 1);
        if (saved_err >= 0)
                dup2(saved_err, 2);
        int fds[] = {null, saved_out, saved_err, sv[0], sv[1]};
        for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
                if (fds[i] >= 0)
                        close(fds[i]);
}

/* ---- the pages a copy will write ----------------------------------------
 *
 * On this kind of machine a copy-on-write fault costs about 20 us (timed
 * with a plain C loop over fresh pages after fork), and a copy
 * takes hundreds of them while it reinitialises the interpreter and goes
 * through its warming runs: most of its preparation time, which decides how
 * soon after a run the next copy is ready. madvise(MADV_POPULATE_WRITE)
 * makes the same private copies in one call, at about 5.6 us a page (the
 * same loop). So, once warm, the template learns which pages a copy
 * writes, from a probe copy that goes through the same steps, and every
 * later copy populates those pages first. File-backed pages the probe read
 * are populated for reading likewise (MADV_POPULATE_READ): fork does not
 * copy their page tables. A kernel without these advices (before 5.14)
 * refuses them, and copies then fault as before. */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
/* Caps: ranges kept, and pages in them (64 MiB), whatever the probe saw;
 * and the address space it reads the page map of: mappings over 1 GiB
 * (AddressSanitizer's shadow, reserved arenas) are skipped, and at most
 * 4 GiB in all is read. */
#define PREFAULT_MAX_RANGES  1024
#define PREFAULT_MAX_PAGES   16384
#define PREFAULT_MAX_MAPPING (1ull << 30)
#define PREFAULT_MAX_SCANNED (1ull << 32)
#define PROBE_TIMEOUT_MS     2000

typedef struct prefault_range {
        uint64_t start, len;
        uint64_t write; /* MADV_POPULATE_WRITE, else MADV_POPULATE_READ */
} prefault_range;

static prefault_range prefault[PREFAULT_MAX_RANGES];
static size_t n_prefault;
static bool prefault_learned;

#define PAGEMAP_PRESENT   (1ull << 63)
#define PAGEMAP_EXCLUSIVE (1ull << 56)

/* Sends the probe's own touched pages to out, coalesced into ranges, as
 * prefault_range records: in its private writable mappings the pages it
 * holds exclusively (copied on write, or new), in its readable file-backed
 * and other readable mappings the pages present (fork copies no page table
 * entries for those, so present means read by the probe). Special
 * mappings ([vdso], [vvar]) are left out: they cannot be populated. */
static void probe_report(int out)
{
        /* Changing to the mapped ids made the template undumpable, which
         * puts its /proc files out of its own reach; the probe only reads
         * its own, and is gone right after. */
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
        FILE *maps = fopen("/proc/self/maps", "re");
        int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        if (!maps || pagemap < 0)
                _exit(1);
        const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        size_t ranges = 0, pages = 0;
        uint64_t scanned = 0;
        char line[512];
        while (ranges < PREFAULT_MAX_RANGES && pages < PREFAULT_MAX_PAGES &&
               fgets(line, sizeof(line), maps)) {
                unsigned long lo, hi;
                char perms[8], name[256] = "";
                if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &lo, &hi, perms, name) < 3 ||
                    perms[0] != 'r' || hi <= lo || hi - lo > PREFAULT_MAX_MAPPING ||
                    scanned + (hi - lo) > PREFAULT_MAX_SCANNED)
                        continue;
                scanned += hi - lo;
                if (name[0] == '[' && strcmp(name, "[heap]") != 0 && strcmp(name, "[stack]") != 0)
                        continue;
                bool write = strcmp(perms, "rw-p") == 0;
                uint64_t want = PAGEMAP_PRESENT | (write ? PAGEMAP_EXCLUSIVE : 0);
                prefault_range r = {.write = write};
                uint64_t ent[512];
                for (uint64_t v = lo; v < hi && ranges < PREFAULT_MAX_RANGES;) {
                        size_t k = (size_t)((hi - v) / page);
                        if (k > ARRAY_SIZE(ent))
                                k = ARRAY_SIZE(ent);
                        ssize_t n = pread(pagemap, ent, k * sizeof(ent[0]),
                                          (off_t)(v / page * sizeof(ent[0])));
                        if (n <= 0)
                                break;
                        for (size_t i = 0; i < (size_t)n / sizeof(ent[0]); i++, v += page) {
                                /* Past a cap, the open range ends and no
                                 * new one starts. */
                                bool hit = (ent[i] & want) == want && pages < PREFAULT_MAX_PAGES &&
                                           ranges < PREFAULT_MAX_RANGES;
                                if (hit && !r.len)
                                        r.start = v;
                                if (hit) {
                                        r.len += page;
                                        pages++;
                                }
                                if (r.len && (!hit || v + page >= hi)) {
                                        if (al_write_full(out, &r, sizeof(r)) < 0)
                                                _exit(1);
                                        ranges++;
                                        r.len = 0;
                                }
                        }
                }
        }
        _exit(0);
}

/* Learns the pages a copy touches from a probe: a plain fork of the warm
 * template that goes through exactly a copy's interpreter steps (the
 * after-fork reset and the warming runs, airlock's own code only) and
 * reports what it touched. A probe that fails leaves nothing learned, and
 * copies prepare as they did without it. */
static void learn_prefault(void)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return;
        guest_before_fork();
        pid_t pid = fork();
        if (pid == 0) {
                close(p[0]);
                guest_after_fork_child(-1);
                for (int pass = 0; pass < PREWARM_PASSES; pass++)
                        prewarm_copy();
                probe_report(p[1]);
        }
        guest_after_fork_parent();
        close(p[1]);
        if (pid > 0) {
                /* The probe takes milliseconds; one that takes longer than
                 * PROBE_TIMEOUT_MS is stopped rather than left holding up
                 * every later copy. */
                uint64_t deadline = al_now_ns() + PROBE_TIMEOUT_MS * 1000000ull;
                prefault_range r;
                for (;;) {
                        uint64_t now = al_now_ns();
                        struct pollfd pf = {p[0], POLLIN, 0};
                        int k = now < deadline ? poll(&pf, 1, (int)((deadline - now) / 1000000 + 1))
                                               : 0;
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k <= 0) {
                                kill(pid, SIGKILL);
                                break;
                        }
                        ssize_t n = read(p[0], &r, sizeof(r));
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n != (ssize_t)sizeof(r) || n_prefault >= PREFAULT_MAX_RANGES)
                                break;
                        prefault[n_prefault++] = r;
                }
                int status = 0;
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                        ;
                /* A probe cut short reported only part: use none of it. */
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                        n_prefault = 0;
        }
        close(p[0]);
}

/* In a new copy, before anything else touches memory: its own copies of
 * the pages the probe wrote, and page table entries for those it read. */
static void populate_learned(void)
{
        for (size_t i = 0; i < n_prefault; i++)
                (void)madvise((void *)(uintptr_t)prefault[i].start, prefault[i].len,
                              prefault[i].write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
}

/* ---- what makes each copy its own ---------------------------------------
 *
 * Copies of one template must never meet: a copy gets its own user, IPC,
 * mount and PID namespace, its own cgroup where the host has cgroups, and a
 * Landlock domain that scopes abstract Unix sockets and signals to it (or,
 * on a kernel without Landlock scopes, its own network namespace, which
 * costs about 0.4 ms of the template's time per copy here). */

/* Per-run caps on counters the kernel keeps per user namespace. */
#define COPY_MAX_SIGPENDING      256
#define COPY_MAX_MEMLOCK         (64u << 10)
#define COPY_MAX_INOTIFY         32
#define COPY_MAX_INOTIFY_WATCHES 4096
#define COPY_MAX_FANOTIFY        0
#define COPY_MAX_STACK           (8u << 20)
#define COPY_MAX_SYSV_IDS        32
#define COPY_MAX_MSGQUEUE_BYTES  65536
/* SEMMSL SEMMNS SEMOPM SEMMNI: at most 32 sets, 8000 semaphores in all. */
#define COPY_SEM_LIMITS "250 8000 32 32\n"

#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1u << 0)
#endif
#define AL_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ull << 0)
#define AL_LANDLOCK_SCOPE_SIGNAL               (1ull << 1)

/* The ruleset attribute of Landlock ABI 6, which Debian 12's headers
 * predate. */
struct al_landlock_ruleset_attr {
        uint64_t handled_access_fs;
        uint64_t handled_access_net;
        uint64_t scoped;
};

/* Whether this kernel's Landlock can scope abstract Unix sockets and
 * signals (ABI 6, Linux 6.12). Found once, in the template. */
static bool landlock_scopes;

static void probe_landlock(void)
{
        long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
        landlock_scopes = abi >= 6;
}

/* Contract: in a copy, after no_new_privs and before any guest code. From
 * then on the copy and everything it starts can connect only to abstract
 * Unix sockets, and signal only processes, of its own domain: another
 * copy's (or the template's) are out of reach. Restricts nothing else. */
static int scope_copy(void)
{
        if (!landlock_scopes)
                return 0; /* the copy has its own network namespace instead */
        struct al_landlock_ruleset_attr attr = {
            .scoped = AL_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | AL_LANDLOCK_SCOPE_SIGNAL,
        };
        int fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
        if (fd < 0)
                return -errno;
        int r = (int)syscall(SYS_landlock_restrict_self, fd, 0);
        int e = errno;
        close(fd);
        return r < 0 ? -e : 0;
}

static int write_proc_file(const char *path, const char *text)
{
        int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        int r = al_write_full(fd, text, strlen(text));
        close(fd);
        return r < 0 ? r : 0;
}

/* In a new copy, cloned into its own user namespace: maps its uid and gid
 * 0 to the template's own (so its files are owned by the guest ids, as
 * before), then caps the per-user counters of that namespace. The kernel
 * counts them at every level up to the host, so a copy can spend neither
 * another copy's share nor (see drop_to_guest_ids) the host user's.
 *
 * A process may map only its own ids, and only through its own /proc
 * files, which the kernel gives to root while the process is not dumpable
 * (as every copy of a template that changed its ids is). So the copy is
 * dumpable for the few calls that write the maps: in that time it holds
 * nothing but the template's memory and runs no guest code. */
static int enter_own_user_namespace(void)
{
        static const char *const files[] = {"/proc/self/setgroups", "/proc/self/uid_map",
                                            "/proc/self/gid_map"};
        static const char *const texts[] = {"deny\n", "0 0 1\n", "0 0 1\n"};
        if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
                return -errno;
        int r = 0;
        for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(files); i++)
                r = write_proc_file(files[i], texts[i]);
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 && r >= 0)
                r = -errno;
        if (r < 0)
                return r;
        /* These files still belong to the host's procfs here, which
         * answers for the caller's own user namespace. */
        static const struct {
                const char *name;
                unsigned value;
        } caps[] = {
            {"/proc/sys/user/max_inotify_instances", COPY_MAX_INOTIFY},
            {"/proc/sys/user/max_inotify_watches", COPY_MAX_INOTIFY_WATCHES},
            {"/proc/sys/user/max_fanotify_groups", COPY_MAX_FANOTIFY},
            {"/proc/sys/user/max_fanotify_marks", COPY_MAX_FANOTIFY},
            /* The copy's own IPC namespace: few SysV queues and segments,
             * and small queues. With a cgroup what they hold is charged
             * to the run; without one, queues are kernel memory that no
             * rlimit counts. */
            {"/proc/sys/kernel/msgmni", COPY_MAX_SYSV_IDS},
            {"/proc/sys/kernel/msgmnb", COPY_MAX_MSGQUEUE_BYTES},
            {"/proc/sys/kernel/shmmni", COPY_MAX_SYSV_IDS},
        };
        for (size_t i = 0; i < ARRAY_SIZE(caps); i++) {
                char text[16];
                snprintf(text, sizeof(text), "%u\n", caps[i].value);
                r = write_proc_file(caps[i].name, text);
                /* A kernel without fanotify has no such file. */
                if (r < 0 && !(r == -ENOENT && strstr(caps[i].name, "fanotify")))
                        return r;
        }
        return write_proc_file("/proc/sys/kernel/sem", COPY_SEM_LIMITS);
}

/* ---- per-copy cgroups ----------------------------------------------------
 *
 * As root, the host makes the sandbox's cgroup, owned by the guest ids, and
 * hands its directories to the template. The template makes one child
 * cgroup c<N> per copy, with the run's memory and process limits, and the
 * copy moves itself there before it does anything else, so parallel runs
 * of one sandbox never share a limit and one run's memory hog ends only
 * itself. The move is in the copy's preparation, off a run's path. */

static unsigned copy_cgroup_seq;

static int cg_dirs(int dirs[2])
{
        dirs[0] = params.cgroup ? TEMPLATE_CG_FD : -1;
        dirs[1] = params.cgroup == 1 ? TEMPLATE_CG2_FD : -1;
        return params.cgroup == 1 ? 2 : params.cgroup == 2 ? 1 : 0;
}

static int cg_write(int dirfd, const char *file, const char *text)
{
        int fd = openat(dirfd, file, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        int r = al_write_full(fd, text, strlen(text));
        close(fd);
        return r < 0 ? r : 0;
}

static bool cg_remove_now(uint32_t seq)
{
        char name[24];
        snprintf(name, sizeof(name), "c%u", (unsigned)seq);
        int dirs[2], n = cg_dirs(dirs);
        bool done = true;
        for (int i = 0; i < n; i++)
                if (unlinkat(dirs[i], name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                        done = false;
        return done;
}

/* Copies' cgroups that the host is done with but that could not be
 * removed yet (the copy was still exiting), retried at every wake-up: a
 * copy's exit is one. Past the cap, the host removes what is left when it
 * closes the sandbox. */
#define MAX_PENDING_RM 256
static uint32_t pending_rm[MAX_PENDING_RM];
static size_t n_pending_rm;

static void copy_cgroups_retry(void)
{
        size_t k = 0;
        for (size_t i = 0; i < n_pending_rm; i++)
                if (!cg_remove_now(pending_rm[i]))
                        pending_rm[k++] = pending_rm[i];
        n_pending_rm = k;
}

/* The host has read how the copy's run ended (its OOM counter): its cgroup
 * may go. The host tells this only after the run's result, so removing the
 * cgroup is never on a run's path. */
static void copy_cgroup_done(uint32_t seq)
{
        if (!seq || seq > copy_cgroup_seq || cg_remove_now(seq))
                return;
        if (n_pending_rm < MAX_PENDING_RM)
                pending_rm[n_pending_rm++] = seq;
}

/* Removes the cgroup of a copy that never reached the host. */
static void copy_cgroup_remove(unsigned seq)
{
        if (seq)
                (void)cg_remove_now(seq);
}

/* Makes the next copy's cgroup with the run's limits. Returns in procs the
 * cgroup.procs files the copy writes itself into, and in ret_oom the file
 * whose OOM kill count the host reads after the run. Without cgroups,
 * *ret_seq is 0 and nothing is opened. */
static int copy_cgroup_make(unsigned *ret_seq, int procs[2], int *ret_oom)
{
        int dirs[2], n = cg_dirs(dirs);
        if (n == 0)
                return 0;
        unsigned seq = ++copy_cgroup_seq;
        char name[24], mem[32], pids[32];
        snprintf(name, sizeof(name), "c%u", seq);
        snprintf(mem, sizeof(mem), "%llu", (unsigned long long)params.limits.memory_bytes);
        snprintf(pids, sizeof(pids), "%u", params.limits.pids + CG_PIDS_SLACK);
        int cg[2] = {-1, -1}, r = 0;
        for (int i = 0; i < n && r >= 0; i++) {
                /* A cgroup of that name that is already there is not ours
                 * to use: it may have other limits, or other tasks. */
                if (mkdirat(dirs[i], name, 0755) < 0)
                        r = -errno;
                else if ((cg[i] = openat(dirs[i], name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
                        r = -errno;
        }
        if (r >= 0 && params.cgroup == 1) {
                r = cg_write(cg[0], "memory.limit_in_bytes", mem);
                /* Swap would let a run exceed the limit; where swap is
                 * accounted, that door is closed too. */
                if (r >= 0)
                        (void)cg_write(cg[0], "memory.memsw.limit_in_bytes", mem);
                if (r >= 0)
                        r = cg_write(cg[1], "pids.max", pids);
        } else if (r >= 0) {
                r = cg_write(cg[0], "memory.max", mem);
                if (r >= 0)
                        (void)cg_write(cg[0], "memory.swap.max", "0");
                if (r >= 0)
                        r = cg_write(cg[0], "pids.max", pids);
        }
        int oom = -1;
        if (r >= 0) {
                oom = openat(cg[0], params.cgroup == 1 ? "memory.oom_control" : "memory.events",
                             O_RDONLY | O_CLOEXEC);
                if (oom < 0)
                        r = -errno;
        }
        for (int i = 0; i < n && r >= 0; i++)
                if ((procs[i] = openat(cg[i], "cgroup.procs", O_WRONLY | O_CLOEXEC)) < 0)
                        r = -errno;
        for (int i = 0; i < n; i++)
                if (cg[i] >= 0)
                        close(cg[i]);
        if (r < 0) {
                for (int i = 0; i < 2; i++)
                        if (procs[i] >= 0)
                                close(procs[i]);
                procs[0] = procs[1] = -1;
                if (oom >= 0)
                        close(oom);
                copy_cgroup_remove(seq);
                return r;
        }
        *ret_seq = seq;
        *ret_oom = oom;
        return 0;
}

/* In a new copy, first of all: moves itself into its cgroup, then makes
 * its cgroup namespace, so that the guest sees that cgroup as its root. */
static int join_copy_cgroup(const int procs[2])
{
        int r = 0;
        for (int i = 0; i < 2; i++) {
                if (procs[i] < 0)
                        continue;
                if (r >= 0 && al_write_full(procs[i], "0", 1) < 0)
                        r = -errno;
                close(procs[i]);
        }
        if (r >= 0 && unshare(CLONE_NEWCGROUP) < 0)
                r = -errno;
        return r;
}

/* A fresh copy: pid 1 of its own PID namespace, in its own mount namespace.
 * It mounts its private /output, /tmp and /proc, hands the host its /output
 * fd, drops every privilege, loads the seccomp filter, and waits for code.
 * Everything here runs before any guest code. */
_Noreturn static void copy_main(int chan, int out_w, int err_w, const int procs[2])
{
        /* Into the copy's own cgroup before it allocates anything, so that
         * every page it writes from now on is charged to this run alone. */
        int r = join_copy_cgroup(procs);
        if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0 || dup3(chan, COPY_CHANNEL_FD, O_CLOEXEC) < 0)
                _exit(126);
        chan = COPY_CHANNEL_FD;
        /* Nothing of the template's may reach the guest: not the control
         * socket, not other copies' fds. */
        syscall(SYS_close_range, COPY_CHANNEL_FD + 1, ~0u, 0);
        ctl_fd = -1;
        if (r < 0)
                copy_fail(chan, "cannot join the run's cgroup: %s", strerror(-r));
        r = enter_own_user_namespace();
        if (r < 0)
                copy_fail(chan, "cannot set up the run's user namespace: %s", strerror(-r));

        populate_learned();
        guest_after_fork_child(chan);

        const unsigned long tmpfs_flags = MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOSYMFOLLOW;
        if (mount("tmpfs", "/output", "tmpfs", tmpfs_flags, out_opts) < 0 &&
            mount("tmpfs", "/output", "tmpfs", tmpfs_flags & ~MS_NOSYMFOLLOW, out_opts) < 0)
                copy_fail(chan, "cannot mount /output: %m");
        if (mount("tmpfs", "/tmp", "tmpfs", tmpfs_flags, tmp_opts) < 0 &&
            mount("tmpfs", "/tmp", "tmpfs", tmpfs_flags & ~MS_NOSYMFOLLOW, tmp_opts) < 0)
                copy_fail(chan, "cannot mount /tmp: %m");
        if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid") < 0 &&
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                copy_fail(chan, "cannot mount /proc: %m");
        /* The cache is still being filled for later copies: this one sees
         * it read-only all the same. */
        if (!cache_sealed && make_readonly(GUEST_CACHE_DIR, false, true) < 0)
                copy_fail(chan, "cannot make %s read-only: %m", GUEST_CACHE_DIR);
        int outdir = open("/output", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (outdir < 0)
                copy_fail(chan, "cannot open /output: %m");
        if (chdir("/tmp") < 0)
                copy_fail(chan, "cannot enter /tmp: %m");

        rlim_t cpu =
            (rlim_t)(params.limits.cpu_s > 0 ? params.limits.cpu_s : params.limits.timeout_s) + 1;
        set_limit(RLIMIT_CPU, cpu);
#if !defined(__SANITIZE_ADDRESS__)
        /* Not under AddressSanitizer, whose shadow mappings count as data
         * and exceed any sensible limit; the run's cgroup still applies. */
        set_limit(RLIMIT_DATA, params.limits.memory_bytes);
#endif
        set_limit(RLIMIT_FSIZE, params.limits.max_file_bytes);
        set_limit(RLIMIT_NOFILE, params.limits.open_files);
        set_limit(RLIMIT_CORE, 0);
        set_limit(RLIMIT_MSGQUEUE, 0);
        /* Tasks of this user in the copy's own user namespace: the run's
         * process limit (the host adds a cgroup limit where it can). */
        set_limit(RLIMIT_NPROC, params.limits.pids + 4);
        /* Counted per user namespace, so per run: signals a run may queue
         * and memory it may lock. */
        set_limit(RLIMIT_SIGPENDING, COPY_MAX_SIGPENDING);
        set_limit(RLIMIT_MEMLOCK, COPY_MAX_MEMLOCK);
        /* The main stack is not data: without this a host started with an
         * unlimited stack would give the guest unlimited memory there. */
        set_limit(RLIMIT_STACK, COPY_MAX_STACK);

        r = drop_capabilities();
        if (r < 0)
                copy_fail(chan, "cannot drop capabilities: %s", strerror(-r));
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                copy_fail(chan, "cannot set no_new_privs: %m");
        r = scope_copy();
        if (r < 0)
                copy_fail(chan, "cannot scope the run with Landlock: %s", strerror(-r));
        if (syscall(SYS_seccomp, 1 /* SECCOMP_SET_MODE_FILTER */, 0, &guest_filter) < 0)
                copy_fail(chan, "cannot load the seccomp filter: %m");

        /* The first copy is made before the template's own warm-up, for a
         * new sandbox's first run, which is waited for: warming would only
         * move the same work ahead of it. */
        for (int pass = 0; warmed_up && pass < PREWARM_PASSES; pass++)
                prewarm_copy();

        if (send_fds(chan, COPY_READY, NULL, &outdir, 1) < 0)
                _exit(126);
        close(outdir);

        serve_host(chan);
}

/* Forks a copy for the host: clone3 with a new PID and mount namespace,
 * CLONE_PARENT so the host (not the template) is its parent and can wait
 * for it through its pidfd. */
static void spawn_copy(void)
{
        int sv[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
        /* The host's ends of the output pipes are non-blocking (it drains
         * them between other events), set here rather than on every run. */
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
            pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
            fcntl(out[0], F_SETFL, O_NONBLOCK) < 0 || fcntl(err[0], F_SETFL, O_NONBLOCK) < 0) {
                char msg[128];
                int n = snprintf(msg, sizeof(msg), "%c%d copy|cannot create the channel: %s",
                                 CTL_ERROR, errno, strerror(errno));
                (void)!send(ctl_fd, msg, (size_t)n, MSG_NOSIGNAL);
                goto out;
        }
        int pidfd = -1, procs[2] = {-1, -1}, oomfd = -1;
        unsigned seq = 0;
        int r = copy_cgroup_make(&seq, procs, &oomfd);
        if (r < 0) {
                char msg[160];
                int n = snprintf(msg, sizeof(msg), "%c%d copy|cannot create the run's cgroup: %s",
                                 CTL_ERROR, -r, strerror(-r));
                (void)!send(ctl_fd, msg, (size_t)n, MSG_NOSIGNAL);
                goto out;
        }
        /* Each copy has its own user namespace (its per-user counters and
         * limits are the run's alone), IPC namespace (no SysV object of one
         * run reaches another or outlives it) and, where Landlock cannot
         * scope abstract Unix sockets, network namespace. */
        struct clone_args args = {
            .flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWIPC | CLONE_PARENT |
                     CLONE_PIDFD | (landlock_scopes ? 0 : CLONE_NEWNET),
            .pidfd = (uint64_t)(uintptr_t)&pidfd,
            .exit_signal = 0,
        };
        guest_before_fork();
        long pid = syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0) {
                close(sv[0]);
                close(out[0]);
                close(err[0]);
                if (oomfd >= 0)
                        close(oomfd);
                copy_main(sv[1], out[1], err[1], procs);
        }
        int saved = errno;
        guest_after_fork_parent();
        for (int i = 0; i < 2; i++)
                if (procs[i] >= 0)
                        close(procs[i]);
        if (pid < 0) {
                char msg[160];
                int n = snprintf(msg, sizeof(msg), "%c%d copy|cannot start a copy: %s", CTL_ERROR,
                                 saved, strerror(saved));
                (void)!send(ctl_fd, msg, (size_t)n, MSG_NOSIGNAL);
                if (oomfd >= 0)
                        close(oomfd);
                copy_cgroup_remove(seq);
                goto out;
        }
        int fds[5] = {sv[0], pidfd, out[0], err[0], oomfd};
        if (n_live_copies < MAX_LIVE_COPIES)
                live_copies[n_live_copies++] = pidfd;
        else
                close(pidfd);
        /* With its pid, by which the host reaps it once it is dead, and the
         * number of its cgroup, which the host removes after that. */
        char pidtext[40];
        snprintf(pidtext, sizeof(pidtext), "%ld %u", pid, seq);
        if (send_fds(ctl_fd, CTL_COPY, pidtext, fds, oomfd >= 0 ? 5 : 4) < 0)
                host_gone();
        if (oomfd >= 0)
                close(oomfd);
out:
        for (int i = 0; i < 2; i++) {
                if (sv[i] >= 0)
                        close(sv[i]);
                if (out[i] >= 0)
                        close(out[i]);
                if (err[i] >= 0)
                        close(err[i]);
        }
}

_Noreturn void template_main(void)
{
        /* Signals meant for the host's terminal are not the template's. */
        setsid();
        signal(SIGPIPE, SIG_IGN);
        /* LD_BIND_NOW did its work when this program was loaded; the
         * guest's own programs need not pay for it. */
        unsetenv("LD_BIND_NOW");
        read_params();

        int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(devnull, 1) < 0 || dup2(devnull, 2) < 0)
                fail(-errno, "setup", "cannot open /dev/null: %m");
        close(devnull);

        setup_namespaces();
        probe_landlock();

        /* Without a cgroup nothing counts what the tmpfs mounts hold
         * against the memory limit: each is capped at it instead. */
        uint64_t out_bytes = params.limits.output_fs_bytes, tmp_bytes = params.limits.tmp_bytes;
        if (!params.cgroup) {
                out_bytes = MIN(out_bytes, params.limits.memory_bytes);
                tmp_bytes = MIN(tmp_bytes, params.limits.memory_bytes);
        }
        uint64_t inodes = (uint64_t)params.limits.max_output_files * 4 + 1024;
        snprintf(out_opts, sizeof(out_opts), "size=%llu,nr_inodes=%llu,mode=0755",
                 (unsigned long long)out_bytes, (unsigned long long)inodes);
        /* Inodes are kernel memory too: without a cgroup, one per 16 KiB
         * of the memory limit. */
        uint64_t tmp_inodes =
            params.cgroup ? 65536 : MAX(1024, MIN(65536, params.limits.memory_bytes >> 14));
        snprintf(tmp_opts, sizeof(tmp_opts), "size=%llu,nr_inodes=%llu,mode=01777",
                 (unsigned long long)tmp_bytes, (unsigned long long)tmp_inodes);

        char errbuf[900];
        int r =
            seccomp_build_guest_filter(&guest_filter, params.cgroup == 0, errbuf, sizeof(errbuf));
        if (r < 0)
                fail(r, "seccomp", "%s", errbuf);
        r = guest_init(&params, errbuf, sizeof(errbuf));
        if (r < 0)
                fail(r, r == -ENOENT ? "preload" : "python", "%s", errbuf);

        ctl_send_byte(CTL_READY);
        for (;;) {
                /* Again after each copy, in case the host raised it. */
                set_policy(SCHED_IDLE);
                char c = wait_for_work();
                unsigned want = requested_copies() + (c == CTL_SPAWN);
                for (unsigned i = 0; i < want; i++) {
                        /* No pause before the fork: a run's request is
                         * acted on only once its copy has exited, after
                         * the host had its result (wait_for_work), and the
                         * 2 ms pause once kept here, from when the fork
                         * could land on the host's answer, only delayed
                         * the next copy past the 10 ms between calls. */
                        settle_cache();
                        spawn_copy();
                        /* The warm-up comes after the first copy, so that
                         * a new sandbox's first run does not wait for
                         * imports it may not need; every later copy starts
                         * with them done. */
                        if (!warmed_up) {
                                r = guest_warm_up(errbuf, sizeof(errbuf));
                                if (r < 0)
                                        fail(r, "python", "%s", errbuf);
                                warmed_up = true;
                                /* At idle priority, off every run's path. */
                                cache_builder = guest_start_cache_builder();
                                settle_cache();
                        } else if (!prefault_learned) {
                                /* After the second copy, not the first: a
                                 * new sandbox's first run is then over,
                                 * and the probe does not compete with it. */
                                learn_prefault();
                                prefault_learned = true;
                        }
                }
        }
}

/* Runs before main() in every program linked with libairlock: when this
 * process is a template started by the host, it never reaches main(). */
__attribute__((constructor)) static void template_entry(int argc, char **argv)
{
        if (argc < 1 || !argv || !argv[0] || strcmp(argv[0], TEMPLATE_ARGV0) != 0)
                return;
        int type = 0;
        socklen_t len = sizeof(type);
        if (getsockopt(TEMPLATE_CTL_FD, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
            type != SOCK_SEQPACKET)
                return;
        template_main();
}
