/* Host folders of Python packages (--python-path): checking that they suit
 * the sandbox's Python, reading their .pth files, mounting them, and the
 * signature of the Python installation that tells the cache when a sandbox
 * was built from packages that have changed since.
 *
 * These folders are the host user's own (a virtualenv they built), not the
 * guest's: they are read on the host only to check them and to list what
 * the guest gets, never to stage anything. The guest sees each through a
 * read-only overlay over its mount (tpl_root.c, mount_python_paths) inside
 * its own root, so a link in one can only resolve to what the guest's root
 * holds anyway, and its host path shows nowhere. */
#include "config/pypath.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/mount.h>
#include <linux/sched.h>
#include <patchlevel.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif

/* The C extension scan stops at this depth and after this many entries: a
 * site-packages with numpy, pandas, scipy and matplotlib holds some 10,000,
 * and the tags that matter sit within the first three levels. */
#define SCAN_MAX_DEPTH   8
#define SCAN_MAX_ENTRIES 200000
#define PTH_MAX_BYTES    65536

/* "python3.12" -> 3, 12; anything else -> false. */
static bool version_component(const char *s, size_t len, int *major, int *minor)
{
        if (len < 9 || strncmp(s, "python", 6) != 0)
                return false;
        char buf[32];
        if (len >= sizeof(buf))
                return false;
        memcpy(buf, s, len);
        buf[len] = '\0';
        char tail;
        return sscanf(buf + 6, "%d.%d%c", major, minor, &tail) == 2;
}

int pypath_normalize(const char *dir, char **ret, airlock_error *err)
{
        if (!dir || !*dir)
                return al_error(err, -EINVAL, NULL, "--python-path: the folder path is empty");
        char *abs = realpath(dir, NULL);
        if (!abs) {
                int e = errno;
                if (e == ENOENT)
                        return al_error(err, -e, dir, "--python-path %s: no such folder", dir);
                return al_error(err, -e, dir, "--python-path %s: %s", dir, strerror(e));
        }
        struct stat st;
        if (stat(abs, &st) < 0 || !S_ISDIR(st.st_mode)) {
                al_error(err, -ENOTDIR, dir, "--python-path %s is not a folder", dir);
                free(abs);
                return -ENOTDIR;
        }
        /* A site-packages path says which Python it is for
         * (lib/python3.12/site-packages): another minor version's packages
         * would fail at import, one by one, with misleading errors. */
        for (const char *p = abs; *p;) {
                while (*p == '/')
                        p++;
                size_t n = strcspn(p, "/");
                int major, minor;
                if (version_component(p, n, &major, &minor) &&
                    (major != PY_MAJOR_VERSION || minor != PY_MINOR_VERSION)) {
                        al_error(err, -EINVAL, dir,
                                 "--python-path %s is for Python %d.%d (its path names "
                                 "%.*s), but the sandbox runs Python %d.%d: give a folder "
                                 "built for Python %d.%d",
                                 dir, major, minor, (int)n, p, PY_MAJOR_VERSION, PY_MINOR_VERSION,
                                 PY_MAJOR_VERSION, PY_MINOR_VERSION);
                        free(abs);
                        return -EINVAL;
                }
                p += n;
        }
        *ret = abs;
        return 0;
}

/* A C extension's file name tags the interpreter it was built for:
 * "_x.cpython-312-x86_64-linux-gnu.so". Returns the tag's version as
 * major * 100 + minor, or 0 for names without one (abi3 included, which
 * suits every later version). */
static int extension_version(const char *name)
{
        size_t n = strlen(name);
        if (n < 4 || strcmp(name + n - 3, ".so") != 0)
                return 0;
        const char *t = strstr(name, ".cpython-");
        if (!t || t[9] < '1' || t[9] > '9')
                return 0;
        int v = 0;
        const char *d = t + 9;
        for (; *d >= '0' && *d <= '9' && v < 100000; d++)
                v = v * 10 + (*d - '0');
        /* "311" is 3.11, "39" is 3.9: the first digit is the major. */
        int major = t[9] - '0';
        int minor = v - major * (v >= 100 ? 100 : 10);
        return major * 100 + minor;
}

typedef struct scan {
        size_t entries;
        int found; /* a foreign extension's version, 0 while none */
        char path[PATH_MAX];
} scan;

/* Looks for a C extension of another Python version below dirfd (which it
 * closes), never following a link and never crossing into another
 * filesystem. rel is dirfd's path relative to the folder. */
static void scan_extensions(int dirfd, const char *rel, int depth, dev_t dev, scan *s)
{
        DIR *d = fdopendir(dirfd);
        if (!d) {
                close(dirfd);
                return;
        }
        const int want = PY_MAJOR_VERSION * 100 + PY_MINOR_VERSION;
        struct dirent *de;
        while (!s->found && s->entries < SCAN_MAX_ENTRIES && (de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                s->entries++;
                if (de->d_type == DT_REG || de->d_type == DT_UNKNOWN) {
                        int v = extension_version(de->d_name);
                        if (v && v != want) {
                                s->found = v;
                                snprintf(s->path, sizeof(s->path), "%s%s%s", rel, *rel ? "/" : "",
                                         de->d_name);
                                break;
                        }
                }
                if (depth + 1 >= SCAN_MAX_DEPTH || strcmp(de->d_name, "__pycache__") == 0 ||
                    (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN))
                        continue;
                int sub =
                    openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                struct stat st;
                if (sub < 0)
                        continue;
                if (fstat(sub, &st) < 0 || st.st_dev != dev) {
                        close(sub);
                        continue;
                }
                char subrel[PATH_MAX];
                if (snprintf(subrel, sizeof(subrel), "%s%s%s", rel, *rel ? "/" : "", de->d_name) >=
                    (int)sizeof(subrel)) {
                        close(sub);
                        continue;
                }
                scan_extensions(sub, subrel, depth + 1, dev, s);
        }
        closedir(d);
}

/* Reads one .pth file of the folder (dirfd) and handles its path entries
 * as site.py would, but only inside the folder: an entry that resolves
 * below it is added to sys_path by its guest path; one that resolves
 * elsewhere (an editable install's source tree, typically) is not, and is
 * reported. "import" lines are code, which site.py would run at start-up;
 * the sandbox runs none, so they are skipped. */
static int read_pth(int dirfd, const char *dir, const char *name, size_t index, json_t *sys_path,
                    dynbuf *warnings)
{
        int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
                return 0;
        struct stat st;
        char *text = NULL;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= PTH_MAX_BYTES)
                text = calloc(1, (size_t)st.st_size + 1);
        ssize_t n = text ? read(fd, text, (size_t)st.st_size) : -1;
        close(fd);
        if (n < 0) {
                free(text);
                return 0;
        }
        text[n] = '\0';
        int r = 0;
        size_t dirlen = strlen(dir);
        char *save = NULL;
        for (char *line = strtok_r(text, "\r\n", &save); r >= 0 && line;
             line = strtok_r(NULL, "\r\n", &save)) {
                while (*line == ' ' || *line == '\t')
                        line++;
                size_t len = strlen(line);
                while (len && (line[len - 1] == ' ' || line[len - 1] == '\t'))
                        line[--len] = '\0';
                if (!len || line[0] == '#' || strncmp(line, "import ", 7) == 0 ||
                    strncmp(line, "import\t", 7) == 0)
                        continue;
                char joined[PATH_MAX * 2];
                snprintf(joined, sizeof(joined), "%s%s%s", line[0] == '/' ? "" : dir,
                         line[0] == '/' ? "" : "/", line);
                char *real = realpath(joined, NULL);
                /* site.py skips entries that do not exist; so does this,
                 * unless the entry plainly points outside the folder. */
                const char *where = real ? real : joined;
                bool inside = strncmp(where, dir, dirlen) == 0 &&
                              (where[dirlen] == '/' || where[dirlen] == '\0');
                if (real && inside) {
                        char guest[PATH_MAX];
                        snprintf(guest, sizeof(guest), PYPATH_GUEST_DIR "/%zu%s", index,
                                 real + dirlen);
                        r = json_array_append_new(sys_path, json_string(guest)) ? -ENOMEM : 0;
                } else if (!inside) {
                        r = dynbuf_appendf(warnings,
                                           "--python-path %s: %s names %s, outside the folder: "
                                           "not followed (install that package into the folder "
                                           "instead of in editable mode)\n",
                                           dir, name, line);
                }
                free(real);
        }
        free(text);
        return r < 0 ? -ENOMEM : 0;
}

int pypath_inspect(const char *dir, size_t index, json_t *sys_path, dynbuf *warnings,
                   airlock_error *err)
{
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return al_error(err, -errno, dir, "--python-path %s: %m", dir);
        struct stat st;
        if (fstat(fd, &st) < 0) {
                int e = errno;
                close(fd);
                return al_error(err, -e, dir, "--python-path %s: %s", dir, strerror(e));
        }
        char guest[64];
        snprintf(guest, sizeof(guest), PYPATH_GUEST_DIR "/%zu", index);
        if (json_array_append_new(sys_path, json_string(guest)) < 0) {
                close(fd);
                return al_error(err, -ENOMEM, dir, "out of memory");
        }
        int r = 0;
        DIR *d = fdopendir(dup(fd));
        struct dirent *de;
        while (r >= 0 && d && (de = readdir(d))) {
                size_t n = strlen(de->d_name);
                if (n > 4 && strcmp(de->d_name + n - 4, ".pth") == 0)
                        r = read_pth(fd, dir, de->d_name, index, sys_path, warnings);
        }
        if (d)
                closedir(d);
        if (r < 0) {
                close(fd);
                return al_error(err, r, dir, "--python-path %s: out of memory", dir);
        }
        /* The dup shared the directory's offset, which its readdir left
         * at the end. */
        (void)lseek(fd, 0, SEEK_SET);
        scan s = {0};
        scan_extensions(fd, "", 0, st.st_dev, &s);
        if (s.found)
                return al_error(err, -EINVAL, dir,
                                "--python-path %s holds packages built for Python %d.%d (%s), "
                                "but the sandbox runs Python %d.%d: give a folder built for "
                                "Python %d.%d",
                                dir, s.found / 100, s.found % 100, s.path, PY_MAJOR_VERSION,
                                PY_MINOR_VERSION, PY_MAJOR_VERSION, PY_MINOR_VERSION);
        return 0;
}

static int write_text(const char *path, const char *text)
{
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = al_write_full(fd, text, strlen(text));
        close(fd);
        return r < 0 ? r : 0;
}

/* A user namespace in which the folder's owner (uid, gid) is the guest's
 * host id: the idmapping of the folder's mount. Made by a child that only
 * waits; returns an fd of its namespace, or -errno. */
static int idmap_userns(uid_t owner, gid_t group, uid_t guest_uid, gid_t guest_gid)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        struct clone_args args = {.flags = CLONE_NEWUSER, .exit_signal = SIGCHLD};
        long pid = syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0) {
                /* Only async-signal-safe calls: the host may be threaded. */
                char c;
                close(p[1]);
                (void)!read(p[0], &c, 1);
                _exit(0);
        }
        close(p[0]);
        if (pid < 0) {
                int e = errno;
                close(p[1]);
                return -e;
        }
        char path[64], map[64];
        int r;
        snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)owner, (unsigned)guest_uid);
        snprintf(path, sizeof(path), "/proc/%ld/uid_map", pid);
        r = write_text(path, map);
        if (r >= 0) {
                snprintf(path, sizeof(path), "/proc/%ld/setgroups", pid);
                (void)write_text(path, "deny\n");
                snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)group, (unsigned)guest_gid);
                snprintf(path, sizeof(path), "/proc/%ld/gid_map", pid);
                r = write_text(path, map);
        }
        int ns = -1;
        if (r >= 0) {
                snprintf(path, sizeof(path), "/proc/%ld/ns/user", pid);
                ns = open(path, O_RDONLY | O_CLOEXEC);
                if (ns < 0)
                        r = -errno;
        }
        close(p[1]);
        while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR)
                ;
        return r < 0 ? r : ns;
}

int pypath_open_tree(const char *dir, uid_t guest_uid, gid_t guest_gid, int *ret_fd,
                     airlock_error *err)
{
        *ret_fd = -1;
        if (geteuid() != 0)
                return 0;
        /* Not recursive: a mount inside the folder is not the folder's, and
         * stays out of the guest's reach, as staging does not cross one. */
        int fd = (int)syscall(SYS_open_tree, AT_FDCWD, dir, OPEN_TREE_CLONE | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOSYS || errno == EPERM)
                        return 0;
                return al_error(err, -errno, dir, "--python-path %s: %m", dir);
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode)) {
                close(fd);
                return al_error(err, -ENOTDIR, dir, "--python-path %s is not a folder", dir);
        }
        /* No noexec: C extensions are mapped executable, which a noexec
         * mount refuses. nosuid and nodev take away what exec could gain. */
        const uint64_t base = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        /* The idmapping makes the folder's owner the guest's id, so that a
         * folder only its owner may read (root's virtualenv, umask 077) is
         * readable in the guest, which runs as nobody. The mount is read-only
         * and the guest can never change a mount (no capabilities, and
         * seccomp refuses every mount call), so owning the files through
         * it grants reading only. A filesystem without idmapped mounts
         * leaves the folder with its own owners: readable when its modes
         * let others read, which the template checks. */
        int ns = idmap_userns(st.st_uid, st.st_gid, guest_uid, guest_gid);
        if (ns >= 0) {
                struct mount_attr a = {.attr_set = base | MOUNT_ATTR_IDMAP,
                                       .userns_fd = (uint64_t)ns};
                int r = (int)syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &a, sizeof(a));
                close(ns);
                if (r == 0) {
                        *ret_fd = fd;
                        return 0;
                }
        }
        struct mount_attr a = {.attr_set = base};
        if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0) {
                int e = errno;
                close(fd);
                return al_error(err, -e, dir, "--python-path %s: cannot make it read-only: %s", dir,
                                strerror(e));
        }
        *ret_fd = fd;
        return 0;
}

/* FNV-1a over the bytes of v. */
static void hash_bytes(uint64_t *h, const void *v, size_t n)
{
        const unsigned char *p = v;
        for (size_t i = 0; i < n; i++) {
                *h ^= p[i];
                *h *= 0x100000001b3ull;
        }
}

static void hash_stat(uint64_t *h, const struct stat *st)
{
        const int64_t f[] = {(int64_t)st->st_ino,          (int64_t)st->st_mode,
                             (int64_t)st->st_size,         (int64_t)st->st_mtim.tv_sec,
                             (int64_t)st->st_mtim.tv_nsec, (int64_t)st->st_ctim.tv_sec,
                             (int64_t)st->st_ctim.tv_nsec};
        hash_bytes(h, f, sizeof(f));
}

/* The folder's own status and, with entries, each top-level entry's: a
 * package installed, removed or upgraded renames or replaces entries of
 * the folder (its dist-info or egg-info folder carries the version), and
 * rewriting a package's files changes its folder's times. A missing
 * folder hashes as missing, so that its creation is seen too. */
static void hash_folder(uint64_t *h, const char *dir, bool entries)
{
        hash_bytes(h, dir, strlen(dir) + 1);
        struct stat st;
        if (!entries) {
                /* The folder's own status only: one stat, where opening
                 * the folder took three system calls on every call of a
                 * server (pypath_env_signature). */
                if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
                        hash_bytes(h, "-", 1);
                else
                        hash_stat(h, &st);
                return;
        }
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0) {
                hash_bytes(h, "-", 1);
                if (fd >= 0)
                        close(fd);
                return;
        }
        hash_stat(h, &st);
        DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return;
        }
        /* readdir order is stable while the folder is unchanged, and a
         * change to the folder changes its own times anyway. */
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.' || strcmp(de->d_name, "__pycache__") == 0)
                        continue;
                hash_bytes(h, de->d_name, strlen(de->d_name) + 1);
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                        hash_stat(h, &st);
        }
        closedir(d);
}

#define STR_(x) #x
#define STR(x)  STR_(x)
#define PYVER   STR(PY_MAJOR_VERSION) "." STR(PY_MINOR_VERSION)

void pypath_env_signature(char *const *python_paths, size_t n, char ret_hex[17])
{
        uint64_t h = 0xcbf29ce484222325ull;
        /* The standard library is upgraded as one Debian package, whose
         * files sit directly in these folders: their own times change. */
        hash_folder(&h, "/usr/lib/python" PYVER, false);
        hash_folder(&h, "/usr/lib/python" PYVER "/lib-dynload", false);
        /* The guest's site folders (sys.path of Debian's python3): apt and
         * pip add, remove or rename (the version is in the name) a
         * package's dist-info or egg-info entry at every install, removal
         * or upgrade, which changes the folder's own times. Stating each
         * of their entries too would cost some 1.7 us an entry on the
         * 2-core test machine (240 us for Debian's 131): too much for
         * every call, for what the folder's times already show. */
        hash_folder(&h, "/usr/lib/python3/dist-packages", false);
        hash_folder(&h, "/usr/lib/python" PYVER "/dist-packages", false);
        hash_folder(&h, "/usr/local/lib/python" PYVER "/dist-packages", false);
        /* The --python-path folders are where a user rewrites a package in
         * place (a file replaced inside a package's folder changes that
         * folder's times): each top-level entry is stated as well. */
        for (size_t i = 0; i < n; i++)
                hash_folder(&h, python_paths[i], true);
        snprintf(ret_hex, 17, "%016llx", (unsigned long long)h);
}
