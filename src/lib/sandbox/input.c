/* One template, many workspaces: a run's staged input, made apart from the
 * sandbox, and the detached mount of it that a late-input copy attaches as
 * its /input (tpl_copy.c, await_input).
 *
 * Each staged version gets one read-only overlay over its tree, made once
 * as a detached mount (fsopen, fsmount): a file system of its own, whose
 * root the guest's mountinfo shows as "/", never the host's staging path
 * (tpl_root.c, mount_input, says why that matters). Each copy then gets a
 * clone of that mount (open_tree), a few microseconds, and moves it onto
 * its /input. Only a process with CAP_SYS_ADMIN over the mount namespace
 * the layers are mounted in can make the overlay, and only its owner can
 * clone a detached mount. Root can, in the host's namespace. Anyone else
 * gets a mounter: a child of the host in a user and mount namespace of its
 * own, where the host's files are mounted as in the host's, which makes
 * and clones the overlays for the host. Such a mount can be moved into any
 * mount namespace whose mover holds CAP_SYS_ADMIN there, a copy's own. */
#include "sandbox/input.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "core/util.h"

/* One staged tree: a whole version, or the top layer of one (the files a
 * version changed, and whiteouts for those it removed). Shared by the
 * versions above it, and removed when the last of them goes. */
typedef struct input_layer {
        fsx_staging staging;
        int fd; /* its tree ("input" in the staging area) */
        atomic_uint refs;
} input_layer;

struct sbx_input {
        /* The layers of the staged tree, the top first; none when nothing
         * was staged. A version staged whole has one; a version made
         * while the one before was held adds a layer of its changes over
         * that one's (sbx_input_new), up to SBX_INPUT_MAX_LAYERS. */
        input_layer *layers[SBX_INPUT_MAX_LAYERS];
        size_t n_layers;
        uint64_t files_staged; /* sbx_input_files_staged */
        fsx_manifest *manifest;
        /* The detached overlay over the staged tree, or -1: none staged,
         * or let go while the input is idle (sbx_input_idle), made again
         * by the next sbx_input_tree. ovl_lock guards it. */
        int ovl;
        pthread_mutex_t ovl_lock;
        uid_t owner;
        gid_t group;
};

static int make_overlay(const int *layers, size_t n);
static int mounter_call(sbx_mounter *m, char op, const int *fds, size_t n, int *ret_fd,
                        airlock_error *err);

/* The overlay of in's staged layers (in->ovl), the top one first; one
 * layer alone gets an empty directory beside it in its staging area as a
 * second (an overlay without an upper layer needs two lower ones). */
static int input_overlay(sbx_input *in, sbx_mounter *m, airlock_error *err)
{
        const fsx_staging *top = &in->layers[0]->staging;
        _cleanup_close_ int empty = -1;
        int fds[SBX_INPUT_MAX_LAYERS + 1];
        size_t n = 0;
        for (; n < in->n_layers; n++)
                fds[n] = in->layers[n]->fd;
        if (n == 1) {
                _cleanup_close_ int area = openat(top->parent_fd, top->name,
                                                  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (area < 0 || (mkdirat(area, "empty", 0555) < 0 && errno != EEXIST))
                        return al_error(err, -errno, top->name,
                                        "cannot make the staging area's empty layer: %m");
                empty = openat(area, "empty", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (empty < 0)
                        return al_error(err, -errno, top->name,
                                        "cannot open the staging area's empty layer: %m");
                fds[n++] = empty;
        }
        if (geteuid() == 0) {
                int fd = make_overlay(fds, n);
                if (fd < 0)
                        return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, fd, NULL,
                                             "sandbox unavailable (overlay mount): cannot mount "
                                             "the staged input: %s",
                                             strerror(-fd));
                in->ovl = fd;
                return 0;
        }
        return mounter_call(m, 'O', fds, n, &in->ovl, err);
}

int sbx_stage_sources(const airlock_config *cfg, fsx_source **ret, size_t *ret_n)
{
        size_t n = (cfg->workspace ? 1 : 0) + cfg->n_mounts, k = 0;
        *ret = NULL;
        *ret_n = 0;
        if (!n)
                return 0;
        fsx_source *src = calloc(n, sizeof(*src));
        if (!src)
                return -ENOMEM;
        if (cfg->workspace)
                src[k++] = (fsx_source){cfg->workspace, NULL};
        for (size_t i = 0; i < cfg->n_mounts; i++)
                src[k++] = (fsx_source){cfg->mounts[i].host, cfg->mounts[i].dest};
        *ret = src;
        *ret_n = n;
        return 0;
}

fsx_limits sbx_stage_limits(const airlock_config *cfg)
{
        return (fsx_limits){
            .max_bytes = cfg->limits.max_stage_bytes,
            .max_files = cfg->limits.max_stage_files,
            .max_depth = cfg->limits.max_stage_depth,
        };
}

const char *sbx_stage_parent(void)
{
        const char *tmp = getenv("TMPDIR");
        return tmp && tmp[0] == '/' ? tmp : "/tmp";
}

/* A new input with nothing in it yet, or NULL when out of memory. */
static sbx_input *input_alloc(uid_t owner, gid_t group)
{
        sbx_input *in = calloc(1, sizeof(*in));
        if (!in)
                return NULL;
        in->ovl = -1;
        pthread_mutex_init(&in->ovl_lock, NULL);
        in->owner = owner;
        in->group = group;
        return in;
}

/* A layer of a new staging: takes over *staging and *fd. NULL when out
 * of memory (then both are left to the caller). */
static input_layer *layer_new(fsx_staging *staging, int *fd)
{
        input_layer *l = calloc(1, sizeof(*l));
        if (!l)
                return NULL;
        l->staging = *staging;
        l->fd = *fd;
        atomic_init(&l->refs, 1);
        *staging = (fsx_staging){.parent_fd = -1};
        *fd = -1;
        return l;
}

static void layer_unref(input_layer *l)
{
        if (!l || atomic_fetch_sub(&l->refs, 1) != 1)
                return;
        if (l->fd >= 0)
                close(l->fd);
        fsx_staging_remove(&l->staging);
        free(l);
}

/* Stages the workspace whole into a new layer of in (its only one), with
 * prev's unchanged files linked when prev is one tree staged for the same
 * ids (a link shares the inode, and so its owner). */
static int stage_whole(const airlock_config *cfg, sbx_input *in, const sbx_input *prev,
                       airlock_error *err)
{
        _cleanup_free_ fsx_source *src = NULL;
        size_t n = 0;
        if (sbx_stage_sources(cfg, &src, &n) < 0)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        const fsx_limits lim = sbx_stage_limits(cfg);
        bool reuse = prev && prev->n_layers == 1 && prev->manifest && prev->owner == in->owner &&
                     prev->group == in->group;
        fsx_staging staging = {.parent_fd = -1};
        int fd = -1;
        int r = fsx_staging_create(sbx_stage_parent(), src, n, &lim, in->owner, in->group,
                                   reuse ? prev->layers[0]->fd : -1, reuse ? prev->manifest : NULL,
                                   &staging, &fd, &in->manifest, err);
        if (r < 0 || fd < 0)
                return r;
        in->files_staged = fsx_manifest_count(in->manifest);
        if (!(in->layers[0] = layer_new(&staging, &fd))) {
                close(fd);
                fsx_staging_remove(&staging);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        in->n_layers = 1;
        return 0;
}

/* Contract: the new version as a layer of its changes over prev's layers,
 * which it holds (prev itself may then go, its layers stay while a version
 * over them lives). 1 when a delta cannot make it (the caller stages the
 * workspace whole), 0 when made, -errno. The layer is a new staging area of
 * airlock's own, filled only through fsx_stage_delta; prev's layers are
 * only read (the manifest and the overlay), never written. */
static int stage_layer(const airlock_config *cfg, sbx_input *in, const sbx_input *prev,
                       const char *const *dirs, size_t n_dirs, const char *const *files,
                       size_t n_files, const fsx_hashes *known, airlock_error *err)
{
        if (!prev || !prev->n_layers || prev->n_layers >= SBX_INPUT_MAX_LAYERS || !prev->manifest ||
            prev->owner != in->owner || prev->group != in->group || !sbx_input_updatable(cfg, prev))
                return 1;
        const fsx_limits lim = sbx_stage_limits(cfg);
        fsx_staging staging = {.parent_fd = -1};
        int fd = -1;
        int r =
            fsx_staging_create_empty(sbx_stage_parent(), in->owner, in->group, &staging, &fd, err);
        if (r < 0)
                return r;
        fsx_stage_stats st = {0};
        int lower[SBX_INPUT_MAX_LAYERS];
        for (size_t i = 0; i < prev->n_layers; i++)
                lower[i] = prev->layers[i]->fd;
        r = fsx_stage_delta(fd, lower, prev->n_layers, cfg->workspace, dirs, n_dirs, files, n_files,
                            known, &lim, in->owner, in->group, prev->manifest, &in->manifest, &st,
                            err);
        input_layer *l = r == 0 ? layer_new(&staging, &fd) : NULL;
        if (r == 0 && !l)
                r = al_error(err, -ENOMEM, NULL, "out of memory");
        if (!l) {
                if (fd >= 0)
                        close(fd);
                fsx_staging_remove(&staging);
                fsx_manifest_free(in->manifest);
                in->manifest = NULL;
                if (r == 1)
                        airlock_error_clear(err);
                return r;
        }
        in->layers[0] = l;
        for (size_t i = 0; i < prev->n_layers; i++) {
                atomic_fetch_add(&prev->layers[i]->refs, 1);
                in->layers[i + 1] = prev->layers[i];
        }
        in->n_layers = prev->n_layers + 1;
        in->files_staged = st.files;
        return 0;
}

int sbx_input_new(const airlock_config *cfg, uid_t owner, gid_t group, const sbx_input *prev,
                  const char *const *dirs, size_t n_dirs, const char *const *files, size_t n_files,
                  const fsx_hashes *known, sbx_mounter *m, sbx_input **ret, airlock_error *err)
{
        sbx_input *in = input_alloc(owner, group);
        if (!in)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        int r = dirs ? stage_layer(cfg, in, prev, dirs, n_dirs, files, n_files, known, err) : 1;
        if (r == 1)
                r = stage_whole(cfg, in, prev, err);
        if (r >= 0 && in->n_layers)
                r = input_overlay(in, m, err);
        if (r < 0) {
                sbx_input_free(in);
                return r;
        }
        *ret = in;
        return 0;
}

int sbx_input_update(const airlock_config *cfg, sbx_input *prev, const char *const *dirs,
                     size_t n_dirs, const char *const *files, size_t n_files,
                     const fsx_hashes *known, sbx_mounter *m, sbx_input **ret, airlock_error *err)
{
        sbx_input *in = input_alloc(prev->owner, prev->group);
        if (!in) {
                sbx_input_free(prev);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        const fsx_source src = {cfg->workspace, NULL};
        const fsx_limits lim = sbx_stage_limits(cfg);
        /* Nothing may read the tree while it changes: its overlay goes
         * first (no copy holds a clone of it: prev has no user). */
        sbx_input_idle(prev);
        /* Only the top layer is written, and only when no other version
         * stands on it (the newest version never has one above it). */
        input_layer *top = prev->layers[0];
        bool own_top = atomic_load(&top->refs) == 1;
        int r = 1;
        if (dirs && own_top) {
                fsx_stage_stats st = {0};
                int lower[SBX_INPUT_MAX_LAYERS];
                for (size_t i = 1; i < prev->n_layers; i++)
                        lower[i - 1] = prev->layers[i]->fd;
                r = fsx_stage_delta(top->fd, lower, prev->n_layers - 1, cfg->workspace, dirs,
                                    n_dirs, files, n_files, known, &lim, in->owner, in->group,
                                    prev->manifest, &in->manifest, &st, err);
                if (r == 0) {
                        /* The layers are in's now. */
                        memcpy(in->layers, prev->layers, prev->n_layers * sizeof(*in->layers));
                        in->n_layers = prev->n_layers;
                        prev->n_layers = 0;
                        in->files_staged = st.files;
                } else if (r == 1) {
                        airlock_error_clear(err);
                }
        }
        if (r == 1 && prev->n_layers == 1 && own_top) {
                fsx_stage_stats st = {0};
                fsx_staging staging = {.parent_fd = -1};
                int fd = -1;
                r = fsx_staging_take(&top->staging, &src, &lim, in->owner, in->group,
                                     prev->manifest, &staging, &fd, &in->manifest, &st, err);
                if (r >= 0 && !(in->layers[0] = layer_new(&staging, &fd))) {
                        close(fd);
                        fsx_staging_remove(&staging);
                        r = al_error(err, -ENOMEM, NULL, "out of memory");
                }
                if (r >= 0) {
                        in->n_layers = 1;
                        in->files_staged = fsx_manifest_count(in->manifest);
                }
        } else if (r == 1) {
                r = stage_whole(cfg, in, NULL, err);
        }
        sbx_input_free(prev); /* what it still holds is removed */
        if (r >= 0 && in->n_layers)
                r = input_overlay(in, m, err);
        if (r < 0) {
                sbx_input_free(in);
                return r;
        }
        *ret = in;
        return 0;
}

bool sbx_input_updatable(const airlock_config *cfg, const sbx_input *prev)
{
        return cfg->workspace && cfg->n_mounts == 0 && prev && prev->n_layers && prev->manifest;
}

uint64_t sbx_input_files_staged(const sbx_input *in)
{
        return in ? in->files_staged : 0;
}

size_t sbx_input_layers(const sbx_input *in)
{
        return in ? in->n_layers : 0;
}

void sbx_input_free(sbx_input *in)
{
        if (!in)
                return;
        if (in->ovl >= 0)
                close(in->ovl);
        fsx_manifest_free(in->manifest);
        for (size_t i = 0; i < in->n_layers; i++)
                layer_unref(in->layers[i]);
        pthread_mutex_destroy(&in->ovl_lock);
        free(in);
}

void sbx_input_idle(sbx_input *in)
{
        if (!in)
                return;
        pthread_mutex_lock(&in->ovl_lock);
        if (in->ovl >= 0)
                close(in->ovl);
        in->ovl = -1;
        pthread_mutex_unlock(&in->ovl_lock);
}

/* ---- the mounter ---------------------------------------------------------- */

/* What the mounter answers: one status byte (0, or an errno below 256)
 * with the tree's fd attached when it is 0. */
static int send_reply(int sock, int code, int fd)
{
        unsigned char b = (unsigned char)(code > 0 && code < 256 ? code : code ? EIO : 0);
        return al_send_fds(sock, &b, 1, &fd, fd >= 0 ? 1 : 0);
}

/* A read-only overlay over the n directories layers (of the caller's mount
 * namespace; the top one first), as a detached mount: a fd, or -errno. No
 * allocation: the mounter calls it too. */
static int make_overlay(const int *layers, size_t n)
{
        char opts[(SBX_INPUT_MAX_LAYERS + 1) * 28];
        /* "/proc/self/fd/A:/proc/self/fd/B:...", written without stdio. */
        char *p = opts;
        for (size_t i = 0; i < n; i++) {
                if (i)
                        *p++ = ':';
                memcpy(p, "/proc/self/fd/", 14);
                p += 14;
                p = al_put_decimal(p, layers[i]);
        }
        *p = '\0';
        int fs = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
        if (fs < 0)
                return -errno;
        int r = 0;
        if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", "airlock-input", 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "lowerdir", opts, 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "redirect_dir", "nofollow", 0) < 0 ||
            syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                r = -errno;
        int mnt = r < 0 ? -1
                        : (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                                       MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                           MOUNT_ATTR_NOEXEC);
        if (r >= 0 && mnt < 0)
                r = -errno;
        close(fs);
        return r < 0 ? r : mnt;
}

static int clone_mount(int mnt)
{
        int fd = (int)syscall(SYS_open_tree, mnt, "",
                              AT_EMPTY_PATH | OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static void write_file(const char *path, const char *text, size_t len)
{
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, text, len) != (ssize_t)len)
                _exit(120);
        close(fd);
}

/* Opens again, by path in this process's mount namespace, the directory
 * that fd (from the host's namespace) is, and keeps it only if it is the
 * very same inode: the path cannot lead elsewhere unnoticed. A fd or
 * -errno; system calls only. */
static int reopen_here(int fd)
{
        char link[32], path[4096];
        char *p = link;
        memcpy(p, "/proc/self/fd/", 14);
        p += 14;
        p = al_put_decimal(p, fd);
        *p = '\0';
        ssize_t len = readlink(link, path, sizeof(path) - 1);
        if (len <= 0 || path[0] != '/')
                return -EINVAL;
        path[len] = '\0';
        int again = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (again < 0)
                return -errno;
        struct stat a, b;
        if (fstat(again, &a) < 0 || fstat(fd, &b) < 0 || a.st_dev != b.st_dev ||
            a.st_ino != b.st_ino) {
                close(again);
                return -EXDEV;
        }
        return again;
}

/* The mounter's whole life, in a child forked from a host that may have
 * threads: system calls only, no allocation, no lock. Requests: 'O' with
 * the layers of a staged tree (two to SBX_INPUT_MAX_LAYERS + 1: the top
 * one first, an empty directory last for a tree of one layer), whose
 * overlay it makes; 'C' with an overlay it made, which it clones. */
_Noreturn static void mounter_main(int sock, const char *uid_map, const char *gid_map)
{
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
                _exit(121);
        /* A process that changed its ids (a host that was root and became
         * a user) is not dumpable, and then its /proc files are root's:
         * dumpable only for the time it writes its own maps, holding
         * nothing yet that it did not hold before. */
        int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
        if (dumpable != 1)
                (void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
        write_file("/proc/self/setgroups", "deny", 4);
        write_file("/proc/self/uid_map", uid_map, strlen(uid_map));
        write_file("/proc/self/gid_map", gid_map, strlen(gid_map));
        if (dumpable != 1)
                (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        for (;;) {
                unsigned char op;
                int fds[SBX_INPUT_MAX_LAYERS + 1];
                size_t nfds = 0;
                for (size_t i = 0; i < SBX_INPUT_MAX_LAYERS + 1; i++)
                        fds[i] = -1;
                ssize_t n = al_recv_fds(sock, &op, 1, fds, SBX_INPUT_MAX_LAYERS + 1, &nfds, 0);
                if (n <= 0)
                        _exit(0);
                int r = -EPROTO;
                if (op == 'O' && nfds >= 2) {
                        int here[SBX_INPUT_MAX_LAYERS + 1];
                        size_t k = 0;
                        r = 0;
                        for (; k < nfds && r >= 0; k++)
                                r = here[k] = reopen_here(fds[k]);
                        if (r >= 0)
                                r = make_overlay(here, nfds);
                        else
                                k--; /* the failed one holds no fd */
                        while (k-- > 0)
                                close(here[k]);
                } else if (op == 'C' && nfds == 1) {
                        r = clone_mount(fds[0]);
                }
                for (size_t i = 0; i < SBX_INPUT_MAX_LAYERS + 1; i++)
                        if (fds[i] >= 0)
                                close(fds[i]);
                if (send_reply(sock, r < 0 ? -r : 0, r) < 0)
                        _exit(0);
                if (r >= 0)
                        close(r);
        }
}

int sbx_mounter_start(sbx_mounter *m, airlock_error *err)
{
        m->pid = -1;
        m->sock = -1;
        pthread_mutex_init(&m->lock, NULL);
        char uid_map[64], gid_map[64];
        snprintf(uid_map, sizeof(uid_map), "0 %u 1", (unsigned)geteuid());
        snprintf(gid_map, sizeof(gid_map), "0 %u 1", (unsigned)getegid());
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return al_error(err, -errno, NULL, "cannot make the mounter's socket: %m");
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                int e = errno;
                close(sv[0]);
                close(sv[1]);
                return al_error(err, -e, NULL, "cannot start the mounter: %s", strerror(e));
        }
        if (pid == 0) {
                /* Ends with the host, and holds nothing of the host's but
                 * its one socket. */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (getppid() != parent)
                        _exit(0);
                if (dup2(sv[1], 0) < 0)
                        _exit(122);
                syscall(SYS_close_range, 1, ~0u, 0);
                mounter_main(0, uid_map, gid_map);
        }
        close(sv[1]);
        m->pid = pid;
        m->sock = sv[0];
        return 0;
}

void sbx_mounter_stop(sbx_mounter *m)
{
        if (m->sock >= 0)
                close(m->sock);
        m->sock = -1;
        if (m->pid > 0) {
                kill(m->pid, SIGKILL);
                while (waitpid(m->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        }
        m->pid = -1;
        pthread_mutex_destroy(&m->lock);
}

/* One request to the mounter: op with n fds, and its answer's fd. */
static int mounter_call(sbx_mounter *m, char op, const int *fds, size_t n, int *ret_fd,
                        airlock_error *err)
{
        if (!m || m->sock < 0)
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -ENOSYS, NULL,
                                     "sandbox unavailable (mounter): not started");
        unsigned char b = (unsigned char)op;
        pthread_mutex_lock(&m->lock);
        int w = al_send_fds(m->sock, &b, 1, fds, n);
        int got = -1;
        ssize_t k = w == 0 ? al_recv_fds(m->sock, &b, 1, &got, 1, NULL, 0) : w;
        pthread_mutex_unlock(&m->lock);
        if (k != 1 || b != 0 || got < 0) {
                if (got >= 0)
                        close(got);
                int code = k == 1 ? (b ? b : EPROTO) : k == 0 ? EPIPE : (int)-k;
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -code, NULL,
                                     "sandbox unavailable (mounter): cannot mount the staged "
                                     "input: %s",
                                     strerror(code));
        }
        *ret_fd = got;
        return 0;
}

int sbx_input_tree(sbx_input *in, sbx_mounter *m, int *ret_tree, airlock_error *err)
{
        *ret_tree = -1;
        if (!in || !in->n_layers)
                return 0;
        pthread_mutex_lock(&in->ovl_lock);
        int r = in->ovl >= 0 ? 0 : input_overlay(in, m, err);
        if (r >= 0 && geteuid() == 0) {
                int fd = clone_mount(in->ovl);
                if (fd < 0)
                        r = al_error_kind(err, AIRLOCK_ERROR_SANDBOX, fd, NULL,
                                          "sandbox unavailable (open_tree): cannot clone the "
                                          "staged input: %s",
                                          strerror(-fd));
                else
                        *ret_tree = fd;
        } else if (r >= 0) {
                r = mounter_call(m, 'C', &in->ovl, 1, ret_tree, err);
        }
        pthread_mutex_unlock(&in->ovl_lock);
        return r;
}
