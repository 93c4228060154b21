/* Tenants' workspaces and the workspace tools (see tenant_workspace.h). The
 * file is not called workspace.c: its name is in the program's bytes, which
 * the guest can read, and "/work" is a host folder test_attacks looks for.
 *
 * Every path a client sends is checked as text first (relative, no empty,
 * "." or ".." part, no NUL or control character, at most WS_PATH_MAX bytes,
 * WS_NAME_MAX a part and WS_DEPTH_MAX parts, no part starting with the
 * reserved WS_TMP_PREFIX), then walked one component at a time from the
 * tenant's folder fd with O_NOFOLLOW at every step: a link anywhere on the
 * way, planted on the server's disk, is refused and never followed, and no
 * path string is resolved again later. (The library's fsx_open_beneath does
 * the same through openat2 where the kernel has it; the command line is
 * built on the public API alone and cannot call it, and a walk that creates
 * the missing folders of a write goes one component at a time anyway.)
 *
 * A write is atomic per file (a temporary name in the same folder, then
 * renameat over the file's name) and, as a request, all or nothing against
 * refusals: every path is checked against the disk and both caps are
 * checked before anything is written; then every file is written to its
 * temporary name, and only when all are written are they renamed. The
 * mutations and listings of one tenant are serialised, so that the caps
 * hold against parallel requests of this process and of other processes
 * and hosts that share DIR (a network file system), by a POSIX record lock
 * on the tenant's state file DIR/.airlock/NAME, held from the measure to
 * the rename and waited for at most WS_LOCK_WAIT_S (one of WS_STRIPES locks
 * too where the file system takes no open file description lock, and
 * alone without a state folder: tenant_lock). That file also holds the tenant's generation,
 * a counter every mutation bumps under the lock: a server that sees it
 * move without having moved it itself tells the cache that the tenant's
 * files changed elsewhere (mcp_workspace_moved), which inotify never
 * reports across hosts. */
#include "tenant_workspace.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "mcp.h"
#include "tenant_gen.h"
#include "tenants.h"

#define WS_PATH_MAX   1024 /* bytes of one path */
#define WS_NAME_MAX   255  /* bytes of one component */
#define WS_DEPTH_MAX  32   /* components of one path */
#define WS_WALK_DEPTH 64   /* folders deep a walk of the folder goes */
#define WS_LIST_MAX   100000
#define WS_STRIPES    64
#define WS_TMP_PREFIX ".airlock-upload-"
/* Seconds a write, removal or listing waits for its tenant's lock. */
#define WS_LOCK_WAIT_S 30
/* The tenants' state files (lock and generation), DIR/.airlock/NAME: no
 * tenant name starts with a dot, so no tenant's folder is ever this one. */
#define WS_STATE_DIR ".airlock"
/* Generations remembered, by a hash of the tenant's name: a tenant whose
 * slot another took is told changed once more at its next call. */
#define WS_GENS 4096

/* What a tenant's state file looked like when this server last saw it. */
typedef struct ws_gen {
        char tenant[TENANT_NAME_MAX + 1];
        ino_t ino;
        off_t size;
        struct timespec mtime, ctime;
        /* The generation this server last brought its cache up to (read
         * from the record, or its own bump of the one it had seen). */
        uint64_t seen;
        bool seen_known;
        /* On shared storage: the files this server's own changes wrote or
         * removed since its last call of the tenant took them
         * (mcp_workspace_moved), with their writer's word, so that its
         * cache reads those files alone, as another host's cache does from
         * the record. */
        tenant_gen_change own;
} ws_gen;

/* Seconds between two checks of a tenant's folder (tenant_dir_check) on
 * shared storage. */
#define WS_DIR_CHECK_NS (1000000000ull)

/* When this server last found a tenant's folder a folder (slots by the
 * same hash as the generations). */
typedef struct ws_dir_seen {
        char tenant[TENANT_NAME_MAX + 1];
        uint64_t ns;
} ws_dir_seen;

/* State files kept open on shared storage, in slots by the same hash as
 * the generations: a call checks its tenant's generation with an fstat of
 * the open file, one round trip to the file system's server, where a
 * lookup by name is two (LOOKUP, then GETATTR, with the client's caches
 * off as serving.md asks). The name is looked up again at most once per
 * WS_DIR_CHECK_NS, and at once when the file kept open has no name left
 * (st_nlink 0: removed, or replaced by a rename), so a state file
 * replaced or removed behind airlock's back is followed within that time.
 * At most WS_STATE_FDS files open; a slot another tenant takes closes its
 * file, unless a call checked that one within WS_DIR_CHECK_NS (then the
 * newcomer is looked up by name, as on a local disk: two tenants of one
 * slot never open and close each other's files at every call). Only a
 * regular file is kept (al_open_regular). */
#define WS_STATE_FDS 256

typedef struct ws_state_fd {
        pthread_mutex_t lock;
        char tenant[TENANT_NAME_MAX + 1];
        int fd; /* -1: none */
        dev_t dev;
        ino_t ino;
        uint64_t ns;   /* when the name was last looked up */
        uint64_t used; /* when a call last checked it */
} ws_state_fd;

typedef struct ws_override {
        char tenant[TENANT_NAME_MAX + 1];
        uint64_t caps[2];
} ws_override;

struct mcp_workspaces {
        int dirfd;
        uint64_t max_files, max_bytes;
        pthread_mutex_t lock; /* the overrides */
        ws_override *over;
        size_t n_over;
        pthread_mutex_t stripe[WS_STRIPES];
        int statefd;       /* DIR/.airlock, or -1 (a folder the server cannot write) */
        ws_gen *gens;      /* WS_GENS slots, under lock */
        bool shared;       /* DIR is on a network or FUSE file system (al_remote_fs) */
        ws_dir_seen *dirs; /* WS_GENS slots, under lock, when shared */
        ws_state_fd *sfds; /* WS_STATE_FDS slots, when shared */
};

static void state_fds_free(mcp_workspaces *w)
{
        for (size_t i = 0; w->sfds && i < WS_STATE_FDS; i++) {
                if (w->sfds[i].fd >= 0)
                        close(w->sfds[i].fd);
                pthread_mutex_destroy(&w->sfds[i].lock);
        }
        free(w->sfds);
        w->sfds = NULL;
}

static ws_state_fd *state_fds_new(void)
{
        ws_state_fd *v = calloc(WS_STATE_FDS, sizeof(*v));
        for (size_t i = 0; v && i < WS_STATE_FDS; i++) {
                pthread_mutex_init(&v[i].lock, NULL);
                v[i].fd = -1;
        }
        return v;
}

int mcp_workspaces_open(const char *dir, uint64_t max_files, uint64_t max_bytes,
                        mcp_workspaces **ret, airlock_error *err)
{
        *ret = NULL;
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return al_error(err, -errno, dir, "--tenants-dir %s: cannot create it: %s", dir,
                                strerror(errno));
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return al_error(err, -errno, dir, "--tenants-dir %s: %s", dir, strerror(errno));
        mcp_workspaces *w = calloc(1, sizeof(*w));
        if (!w) {
                close(fd);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        w->dirfd = fd;
        /* Without a state folder (DIR is read-only to the server), the
         * locks and generations are left out, as before they existed. */
        w->statefd = -1;
        if (mkdirat(fd, WS_STATE_DIR, 0700) == 0 || errno == EEXIST)
                w->statefd =
                    openat(fd, WS_STATE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        w->gens = calloc(WS_GENS, sizeof(*w->gens));
        w->shared = al_remote_fs(fd, NULL);
        if (w->shared) {
                w->dirs = calloc(WS_GENS, sizeof(*w->dirs));
                w->sfds = state_fds_new();
        }
        if (!w->gens || (w->shared && (!w->dirs || !w->sfds))) {
                state_fds_free(w);
                free(w->gens);
                free(w->dirs);
                if (w->statefd >= 0)
                        close(w->statefd);
                close(fd);
                free(w);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        w->max_files = max_files;
        w->max_bytes = max_bytes;
        pthread_mutex_init(&w->lock, NULL);
        for (int i = 0; i < WS_STRIPES; i++)
                pthread_mutex_init(&w->stripe[i], NULL);
        *ret = w;
        return 0;
}

void mcp_workspaces_free(mcp_workspaces *w)
{
        if (!w)
                return;
        close(w->dirfd);
        if (w->statefd >= 0)
                close(w->statefd);
        state_fds_free(w);
        for (size_t i = 0; w->gens && i < WS_GENS; i++)
                tenant_gen_change_free(&w->gens[i].own);
        free(w->gens);
        free(w->dirs);
        free(w->over);
        pthread_mutex_destroy(&w->lock);
        for (int i = 0; i < WS_STRIPES; i++)
                pthread_mutex_destroy(&w->stripe[i]);
        free(w);
}

int mcp_workspaces_set_overrides(mcp_workspaces *w, const char *const *tenants,
                                 const uint64_t (*caps)[2], size_t n)
{
        ws_override *v = n ? calloc(n, sizeof(*v)) : NULL;
        if (n && !v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                snprintf(v[i].tenant, sizeof(v[i].tenant), "%s", tenants[i]);
                v[i].caps[0] = caps[i][0];
                v[i].caps[1] = caps[i][1];
        }
        pthread_mutex_lock(&w->lock);
        ws_override *old = w->over;
        w->over = v;
        w->n_over = n;
        pthread_mutex_unlock(&w->lock);
        free(old);
        return 0;
}

/* tenant's caps: its overrides, else the defaults; *own tells which. */
static void caps_of(mcp_workspaces *w, const char *tenant, uint64_t *files, uint64_t *bytes,
                    bool own[2])
{
        *files = w->max_files;
        *bytes = w->max_bytes;
        own[0] = own[1] = false;
        pthread_mutex_lock(&w->lock);
        for (size_t i = 0; i < w->n_over; i++)
                if (strcmp(w->over[i].tenant, tenant) == 0) {
                        if (w->over[i].caps[0] != WS_UNSET) {
                                *files = w->over[i].caps[0];
                                own[0] = true;
                        }
                        if (w->over[i].caps[1] != WS_UNSET) {
                                *bytes = w->over[i].caps[1];
                                own[1] = true;
                        }
                }
        pthread_mutex_unlock(&w->lock);
}

static uint64_t name_hash(const char *tenant)
{
        uint64_t h = 0xcbf29ce484222325ull;
        for (const char *p = tenant; *p; p++)
                h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
        return h;
}

static pthread_mutex_t *stripe_of(mcp_workspaces *w, const char *tenant)
{
        return &w->stripe[name_hash(tenant) % WS_STRIPES];
}

/* ---- the tenant's lock and generation -------------------------------------- */

/* The tenant's lock as held: the state file's fd, whose close lets the
 * record lock go (or -1 without a state folder), and the stripe when it is
 * held too (the process-associated fallback, or no state folder), or NULL. */
typedef struct ws_held {
        int fd;
        pthread_mutex_t *stripe;
} ws_held;

/* Takes the record lock l_type F_WRLCK on fd with cmd (F_OFD_SETLK or
 * F_SETLK), trying again until deadline (al_now_ns) while another holds it.
 * Returns 0, or -errno: -ETIMEDOUT at the deadline. */
static int lock_until(int fd, int cmd, uint64_t deadline)
{
        struct timespec pause = {0, 1000000}; /* 1 ms, doubled up to 64 ms */
        for (;;) {
                struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
                if (fcntl(fd, cmd, &fl) == 0)
                        return 0;
                if (errno != EAGAIN && errno != EACCES && errno != EINTR)
                        return -errno;
                if (al_now_ns() >= deadline)
                        return -ETIMEDOUT;
                nanosleep(&pause, NULL);
                if (pause.tv_nsec < 64000000)
                        pause.tv_nsec *= 2;
        }
}

/* The tenant's state file DIR/.airlock/NAME, opened read-write, made 0600
 * when missing: only ever a regular file (al_open_regular). Any host of a
 * shared volume may put a FIFO or a device node there, which would hold
 * the open for ever or open, and have the record written to, a device of
 * this machine's. Returns the fd, -EINVAL for anything but a regular file,
 * or -errno. */
static int state_open(mcp_workspaces *w, const char *tenant)
{
        for (int tries = 0; tries < 2; tries++) {
                int fd = al_open_regular(w->statefd, tenant, O_RDWR);
                if (fd != -ENOENT)
                        return fd;
                /* O_EXCL: made here, so a regular file; a name made
                 * meanwhile by another host is opened as above. */
                fd = openat(w->statefd, tenant, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            0600);
                if (fd >= 0 || errno != EEXIST)
                        return fd >= 0 ? fd : -errno;
        }
        return -EAGAIN;
}

/* Closes fd, a descriptor of the tenant's state file that tenant_lock does
 * not hold. Any close of a file drops every process-associated record lock
 * the process holds on it, whichever descriptor took it; where the file
 * system refuses open file description locks, tenant_lock's fallback takes
 * such a lock for a thread, under the tenant's stripe. So the close waits
 * for the stripe: no thread of this process holds the tenant's lock
 * meanwhile. (With open file description locks nobody holds the stripe,
 * and a close drops no lock but its own description's.) */
static void state_close(mcp_workspaces *w, const char *tenant, int fd)
{
        pthread_mutex_t *m = stripe_of(w, tenant);
        pthread_mutex_lock(m);
        close(fd);
        pthread_mutex_unlock(m);
}

/* Contract: takes the tenant's lock that holds across processes and hosts
 * sharing DIR: a POSIX record lock (open file description lock where the
 * file system takes one, else a process-associated one; NFS, GlusterFS and
 * CephFS hold both across their clients) on the whole of DIR/.airlock/NAME,
 * waiting for it at most WS_LOCK_WAIT_S: a host that hangs holding it (a
 * frozen process, a partitioned client whose lease has not yet expired)
 * fails this tenant's calls in that time, never holds them for ever. An open
 * file description lock also keeps this process's own threads apart, so it
 * is waited for without the tenant's stripe: a wait never holds up the other
 * tenants of the stripe. The process-associated fallback does not (each
 * thread would take the process's lock at once, and the first close would
 * let it go), so there the stripe is taken first; so it is without a state
 * folder, where the stripe is the only lock. Returns 0 with *h to pass to
 * tenant_unlock, or -errno with err filled. */
static int tenant_lock(mcp_workspaces *w, const char *tenant, ws_held *h, airlock_error *err)
{
        *h = (ws_held){.fd = -1};
        if (w->statefd < 0) {
                h->stripe = stripe_of(w, tenant);
                pthread_mutex_lock(h->stripe);
                return 0;
        }
        int fd = state_open(w, tenant);
        if (fd == -EINVAL)
                return al_error(err, fd, NULL,
                                "the server cannot lock your workspace: its lock file (in "
                                "--tenants-dir's .airlock) is not a regular file, which is "
                                "never opened; the server's operator must remove it");
        if (fd < 0)
                return al_error(err, fd, NULL, "the server cannot open your workspace's lock: %s",
                                strerror(-fd));
        uint64_t deadline = al_now_ns() + (uint64_t)WS_LOCK_WAIT_S * 1000000000ull;
        int r = lock_until(fd, F_OFD_SETLK, deadline);
        if (r == -EINVAL) {
                h->stripe = stripe_of(w, tenant);
                pthread_mutex_lock(h->stripe);
                r = lock_until(fd, F_SETLK, deadline);
        }
        if (r < 0) {
                if (h->stripe) {
                        close(fd);
                        pthread_mutex_unlock(h->stripe);
                } else {
                        state_close(w, tenant, fd);
                }
                h->stripe = NULL;
                if (r == -ETIMEDOUT)
                        return al_error(err, r, NULL,
                                        "another call held your workspace's lock for more than "
                                        "%d s (WS_LOCK_WAIT_S; a host of the cluster may hang "
                                        "holding it): retry later",
                                        WS_LOCK_WAIT_S);
                return al_error(err, r, NULL, "the server cannot lock your workspace: %s",
                                strerror(-r));
        }
        h->fd = fd;
        return 0;
}

/* Lets go of what tenant_lock took. */
static void tenant_unlock(ws_held *h)
{
        if (h->fd >= 0)
                close(h->fd);
        if (h->stripe)
                pthread_mutex_unlock(h->stripe);
        *h = (ws_held){.fd = -1};
}

/* Remembers the state file as st shows it (NULL: missing) and, with
 * known, the generation seen. Under w->lock. */
static void gen_remember_locked(ws_gen *g, const char *tenant, const struct stat *st, bool known,
                                uint64_t seen)
{
        if (strcmp(g->tenant, tenant) != 0)
                tenant_gen_change_free(&g->own);
        snprintf(g->tenant, sizeof(g->tenant), "%s", tenant);
        g->ino = st ? st->st_ino : 0;
        g->size = st ? st->st_size : 0;
        g->mtime = st ? st->st_mtim : (struct timespec){0};
        g->ctime = st ? st->st_ctim : (struct timespec){0};
        g->seen = seen;
        g->seen_known = known;
}

/* Bumps the tenant's generation (lockfd: tenant_lock's, still held) after
 * a change of its files, recording what the change touched (c). When this
 * server had seen the generation its bump follows, it remembers the state
 * file as it left it, so that its own change (which inotify reports here)
 * is not taken for another host's. Else it remembers nothing: another
 * host's change came between, which inotify did not report here, and its
 * next call reads the record from the generation it had seen. */
static void gen_bump(mcp_workspaces *w, const char *tenant, int lockfd, const tenant_gen_change *c)
{
        if (lockfd < 0)
                return;
        uint64_t prev;
        uint64_t gen = tenant_gen_bump(lockfd, c, &prev);
        struct stat st;
        if (!gen || fstat(lockfd, &st) < 0)
                return;
        ws_gen *g = &w->gens[name_hash(tenant) % WS_GENS];
        pthread_mutex_lock(&w->lock);
        if (strcmp(g->tenant, tenant) == 0 && g->seen_known && g->seen == prev) {
                gen_remember_locked(g, tenant, &st, true, gen);
                /* Its own change is told to its own cache at its next
                 * call (its events alone would make the cache sign the
                 * changed folders again, every file of them read). */
                if (w->shared)
                        tenant_gen_change_merge(&g->own, c);
        }
        pthread_mutex_unlock(&w->lock);
}

/* The state file's identity and times against those remembered: true when
 * they are the same (or both missing). */
static bool gen_same(const ws_gen *g, const char *tenant, bool exists, const struct stat *st)
{
        if (strcmp(g->tenant, tenant) != 0)
                return false;
        if (!exists)
                return g->ino == 0;
        return g->ino == st->st_ino && g->size == st->st_size &&
               g->mtime.tv_sec == st->st_mtim.tv_sec && g->mtime.tv_nsec == st->st_mtim.tv_nsec &&
               g->ctime.tv_sec == st->st_ctim.tv_sec && g->ctime.tv_nsec == st->st_ctim.tv_nsec;
}

/* The tenant's state file's identity and times into *st: true when it
 * exists. On shared storage an fstat of the file kept open (ws_state_fd)
 * while its name was looked up within WS_DIR_CHECK_NS and the file still
 * has a name; else a lookup by name, after which the file kept open is the
 * one the name names, opened only when it is a regular file
 * (al_open_regular), or made when missing. A file the slot no longer
 * keeps is closed after the slot's lock (state_close may wait for a
 * write's stripe). */
static bool state_stat(mcp_workspaces *w, const char *tenant, struct stat *st)
{
        if (!w->sfds)
                return fstatat(w->statefd, tenant, st, AT_SYMLINK_NOFOLLOW) == 0;
        ws_state_fd *s = &w->sfds[name_hash(tenant) % WS_STATE_FDS];
        uint64_t now = al_now_ns();
        pthread_mutex_lock(&s->lock);
        bool mine = s->fd >= 0 && strcmp(s->tenant, tenant) == 0;
        if (mine && now - s->ns < WS_DIR_CHECK_NS && fstat(s->fd, st) == 0 && st->st_nlink > 0) {
                s->used = now;
                pthread_mutex_unlock(&s->lock);
                return true;
        }
        bool exists = fstatat(w->statefd, tenant, st, AT_SYMLINK_NOFOLLOW) == 0;
        bool busy = !mine && s->fd >= 0 && now - s->used < WS_DIR_CHECK_NS;
        if (busy || (mine && exists && st->st_dev == s->dev && st->st_ino == s->ino)) {
                if (!busy)
                        s->ns = s->used = now;
                pthread_mutex_unlock(&s->lock);
                return exists;
        }
        char old_tenant[TENANT_NAME_MAX + 1];
        int old = s->fd, fresh = -1;
        snprintf(old_tenant, sizeof(old_tenant), "%s", s->tenant);
        s->fd = -1;
        struct stat fst;
        if (exists && S_ISREG(st->st_mode))
                fresh = al_open_regular(w->statefd, tenant, O_RDONLY);
        /* A missing one is made, empty (generation 0, as the tenant's lock
         * makes it; O_EXCL: a regular file made here, never a name made
         * meanwhile opened): else each call would look its name up until a
         * first write. */
        if (!exists)
                fresh = openat(w->statefd, tenant,
                               O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fresh >= 0 && fstat(fresh, &fst) == 0 &&
            (!exists || (fst.st_dev == st->st_dev && fst.st_ino == st->st_ino))) {
                exists = true;
                *st = fst;
                s->fd = TAKE_FD(fresh);
                s->dev = fst.st_dev;
                s->ino = fst.st_ino;
                s->ns = s->used = now;
                snprintf(s->tenant, sizeof(s->tenant), "%s", tenant);
        }
        pthread_mutex_unlock(&s->lock);
        if (old >= 0)
                state_close(w, old_tenant, old);
        if (fresh >= 0)
                state_close(w, tenant, fresh);
        return exists;
}

/* The tenant's state file opened read-only to read its record: on shared
 * storage a new open of the file kept open (through /proc/self/fd: no
 * lookup by name, and the same file whose times state_stat saw; a new
 * open, as serving.md's fopen-keep-cache=off asks, reads the file
 * afresh), else al_open_regular. Returns the fd or -errno. */
static int state_reopen(mcp_workspaces *w, const char *tenant)
{
        if (w->sfds) {
                ws_state_fd *s = &w->sfds[name_hash(tenant) % WS_STATE_FDS];
                int fd = -ENOENT;
                pthread_mutex_lock(&s->lock);
                if (s->fd >= 0 && strcmp(s->tenant, tenant) == 0)
                        fd = al_reopen(s->fd, O_RDONLY);
                pthread_mutex_unlock(&s->lock);
                if (fd >= 0)
                        return fd;
        }
        return al_open_regular(w->statefd, tenant, O_RDONLY);
}

int mcp_workspace_moved(mcp_workspaces *w, const char *tenant, tenant_gen_change *ret)
{
        *ret = (tenant_gen_change){0};
        if (w->statefd < 0 || !tenant_name_valid(tenant, strlen(tenant)))
                return 0;
        struct stat st;
        bool exists = state_stat(w, tenant, &st);
        ws_gen *g = &w->gens[name_hash(tenant) % WS_GENS];
        pthread_mutex_lock(&w->lock);
        bool same = gen_same(g, tenant, exists, &st);
        bool known = strcmp(g->tenant, tenant) == 0 && g->seen_known;
        uint64_t since = g->seen;
        /* This server's own changes since its last call, told with any
         * other host's. */
        tenant_gen_change own = {0};
        if (strcmp(g->tenant, tenant) == 0) {
                own = g->own;
                g->own = (tenant_gen_change){0};
        }
        pthread_mutex_unlock(&w->lock);
        bool own_any = own.all || own.n || own.n_files;
        if (same) {
                *ret = own;
                return own_any ? 1 : 0;
        }
        /* Read after the stat: a bump in between shows again at the next
         * call's stat, and the record then says nothing is new. */
        uint64_t gen = 0;
        bool read = false;
        int r = 1;
        /* Never anything but a regular file (state_open): a FIFO there
         * would hold this call in open for ever. */
        int fd = exists && S_ISREG(st.st_mode) ? state_reopen(w, tenant) : -1;
        if (fd >= 0) {
                r = tenant_gen_since(fd, since, known, ret, &gen, &read);
                state_close(w, tenant, fd);
        } else {
                ret->all = true;
                /* No state file: no tool ever bumped the generation, 0,
                 * from which the first writer's record starts. */
                read = !exists;
        }
        pthread_mutex_lock(&w->lock);
        gen_remember_locked(g, tenant, exists ? &st : NULL, read, gen);
        pthread_mutex_unlock(&w->lock);
        if (own_any) {
                if (r == 0)
                        *ret = (tenant_gen_change){0};
                tenant_gen_change_merge(ret, &own);
                r = 1;
        }
        tenant_gen_change_free(&own);
        return r;
}

/* The tenant's folder, created 0700 when missing with create. Returns the
 * fd or -errno with err filled for the tenant (never naming DIR). Opened
 * first and made only when missing: every call checks the folder, and on
 * shared storage each of these lookups is a round trip to the file
 * system's server, so a folder that is there costs one. */
static int tenant_dir(mcp_workspaces *w, const char *tenant, bool create, airlock_error *err)
{
        if (!tenant_name_valid(tenant, strlen(tenant))) {
                return al_error(err, -EINVAL, NULL, "no workspace for this client");
        }
        int fd = openat(w->dirfd, tenant, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && create) {
                if (mkdirat(w->dirfd, tenant, 0700) < 0 && errno != EEXIST) {
                        int e = errno;
                        return al_error(err, -e, NULL,
                                        "your workspace folder cannot be created on the server: %s",
                                        strerror(e));
                }
                fd = openat(w->dirfd, tenant, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (fd < 0) {
                int e = errno;
                if (e == ELOOP || e == ENOTDIR)
                        return al_error(
                            err, -e, NULL,
                            "your workspace folder on the server is not a folder (a link "
                            "or a file, which is never followed); the server's operator "
                            "must fix it");
                return al_error(err, -e, NULL, "your workspace folder cannot be opened: %s",
                                strerror(e));
        }
        return fd;
}

int mcp_workspace_name(const mcp_workspaces *w, const char *tenant, char *out, size_t size)
{
        if (!tenant_name_valid(tenant, strlen(tenant)))
                return -EINVAL;
        int n = snprintf(out, size, "/proc/self/fd/%d/%s", w->dirfd, tenant);
        return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* Whether the tenant's folder was found a folder within WS_DIR_CHECK_NS
 * (on shared storage only; a local folder is checked at every call). */
static bool dir_seen_lately(mcp_workspaces *w, const char *tenant, uint64_t now)
{
        if (!w->shared)
                return false;
        const ws_dir_seen *d = &w->dirs[name_hash(tenant) % WS_GENS];
        pthread_mutex_lock(&w->lock);
        bool seen = strcmp(d->tenant, tenant) == 0 && now - d->ns < WS_DIR_CHECK_NS;
        pthread_mutex_unlock(&w->lock);
        return seen;
}

static void dir_seen(mcp_workspaces *w, const char *tenant, uint64_t now)
{
        if (!w->shared)
                return;
        ws_dir_seen *d = &w->dirs[name_hash(tenant) % WS_GENS];
        pthread_mutex_lock(&w->lock);
        snprintf(d->tenant, sizeof(d->tenant), "%s", tenant);
        d->ns = now;
        pthread_mutex_unlock(&w->lock);
}

/* The check of the tenant's folder (mcp_workspace_path): a folder, never a
 * link, made 0700 when missing. A lookup, not an open: on shared storage
 * an open and its close are two more round trips to the file system's
 * server, and the call's own walk opens the folder anyway (without
 * following a link). At every call on a local disk; on shared storage at
 * most once per WS_DIR_CHECK_NS and tenant, since the lookup is a round
 * trip there and the cache's background walk checks the folder's identity
 * too: a folder removed or replaced behind airlock's back is a change like
 * any other made there (design.md, "Shared storage"). A call in between
 * answers from the cache's last walk, following nothing. */
static int tenant_dir_check(mcp_workspaces *w, const char *tenant, airlock_error *err)
{
        if (!tenant_name_valid(tenant, strlen(tenant)))
                return al_error(err, -EINVAL, NULL, "no workspace for this client");
        uint64_t now = al_now_ns();
        if (dir_seen_lately(w, tenant, now))
                return 0;
        struct stat st;
        if (fstatat(w->dirfd, tenant, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode)) {
                /* Missing, or not a folder: tenant_dir makes it or names
                 * the fault. */
                int fd = tenant_dir(w, tenant, true, err);
                if (fd < 0)
                        return fd;
                close(fd);
        }
        dir_seen(w, tenant, now);
        return 0;
}

int mcp_workspace_recheck(mcp_workspaces *w, const char *tenant, airlock_error *err)
{
        if (!w->shared || !tenant_name_valid(tenant, strlen(tenant)))
                return 0;
        ws_dir_seen *d = &w->dirs[name_hash(tenant) % WS_GENS];
        pthread_mutex_lock(&w->lock);
        if (strcmp(d->tenant, tenant) == 0)
                d->ns = 0;
        pthread_mutex_unlock(&w->lock);
        int r = tenant_dir_check(w, tenant, err);
        return r < 0 ? r : 1;
}

int mcp_workspace_path(mcp_workspaces *w, const char *tenant, char *out, size_t size,
                       airlock_error *err)
{
        int r = tenant_dir_check(w, tenant, err);
        if (r < 0)
                return r;
        int n = snprintf(out, size, "/proc/self/fd/%d/%s", w->dirfd, tenant);
        if (n < 0 || (size_t)n >= size)
                return al_error(err, -ENAMETOOLONG, NULL, "workspace path too long");
        return 0;
}

/* ---- results ------------------------------------------------------------ */

/* A result with text for the model and the same facts as structured. */
static json_t *success(const char *text, json_t *structured)
{
        json_t *r = json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text", text,
                              "structuredContent", structured, "isError", 0);
        return r ? r : mcp_tool_error("out of memory");
}

/* How a client's path is shown in a message: as a JSON string (a NUL or a
 * control character is visible), cut to 200 bytes. */
static void shown(const char *p, size_t len, char *out, size_t size)
{
        json_t *s = json_stringn(p, len > 200 ? 200 : len);
        char *t = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        snprintf(out, size, "%s%s", t ? t : "\"?\"", len > 200 ? " (cut)" : "");
        free(t);
        json_decref(s);
}

/* ---- paths ---------------------------------------------------------------- */

/* Checks a client's path as text. Returns 0, or -EINVAL with err saying
 * what is wrong with it. */
static int check_path(const char *p, size_t len, airlock_error *err)
{
        char s[256];
        shown(p, len, s, sizeof(s));
        if (len == 0) {
                return al_error(err, -EINVAL, NULL, "an empty path");
        }
        if (memchr(p, '\0', len)) {
                return al_error(err, -EINVAL, NULL, "path %s holds a NUL character", s);
        }
        if (len > WS_PATH_MAX) {
                return al_error(err, -ENAMETOOLONG, NULL, "path %s is longer than %d bytes", s,
                                WS_PATH_MAX);
        }
        if (p[0] == '/') {
                return al_error(
                    err, -EINVAL, NULL,
                    "path %s is absolute: give it relative to the workspace (it is /input/PATH "
                    "in the sandbox)",
                    s);
        }
        unsigned depth = 0;
        for (const char *c = p; c < p + len;) {
                const char *e = memchr(c, '/', (size_t)(p + len - c));
                if (!e)
                        e = p + len;
                size_t n = (size_t)(e - c);
                depth++;
                if (n == 0) {
                        return al_error(err, -EINVAL, NULL,
                                        "path %s has an empty part (// or a final /)", s);
                }
                if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) {
                        return al_error(err, -EINVAL, NULL,
                                        "path %s has a '%.*s' part: not allowed", s, (int)n, c);
                }
                if (n > WS_NAME_MAX) {
                        return al_error(err, -ENAMETOOLONG, NULL,
                                        "path %s has a part longer than %d bytes", s, WS_NAME_MAX);
                }
                if (n >= sizeof(WS_TMP_PREFIX) - 1 &&
                    memcmp(c, WS_TMP_PREFIX, sizeof(WS_TMP_PREFIX) - 1) == 0) {
                        return al_error(err, -EINVAL, NULL,
                                        "path %s: names starting with %s are the server's", s,
                                        WS_TMP_PREFIX);
                }
                for (size_t i = 0; i < n; i++)
                        if ((unsigned char)c[i] < 0x20 || c[i] == 0x7f) {
                                return al_error(err, -EINVAL, NULL,
                                                "path %s holds a control character", s);
                        }
                c = e + (e < p + len);
                if (e < p + len && c == p + len) {
                        return al_error(err, -EINVAL, NULL,
                                        "path %s has an empty part (// or a final /)", s);
                }
        }
        if (depth > WS_DEPTH_MAX) {
                return al_error(err, -EINVAL, NULL, "path %s is more than %d folders deep", s,
                                WS_DEPTH_MAX);
        }
        return 0;
}

/* What a checked path finds on disk. */
typedef struct resolved {
        int parent;     /* fd of the deepest existing folder on the way, or -1 */
        size_t missing; /* components before the last that do not exist yet */
        bool exists;    /* the last component exists ... */
        struct stat st; /* ... and is this */
        size_t done;    /* bytes of the path through the deepest existing folder */
} resolved;

/* Walks path (checked) from the tenant's folder, never following a link.
 * Returns 0 with r filled, or -errno with err filled: a link, or a file
 * where a folder is needed, on the way (and at the last component too,
 * unless last_link: a link that is removed, never followed). */
static int resolve(int root, const char *path, bool last_link, resolved *r, airlock_error *err)
{
        memset(r, 0, sizeof(*r));
        r->parent = -1;
        char s[256];
        shown(path, strlen(path), s, sizeof(s));
        int cur = fcntl(root, F_DUPFD_CLOEXEC, 0);
        if (cur < 0)
                return al_error(err, -errno, NULL, "path %s: %s", s, strerror(errno));
        const char *c = path;
        char name[WS_NAME_MAX + 1];
        for (;;) {
                const char *e = strchrnul(c, '/');
                size_t n = (size_t)(e - c);
                memcpy(name, c, n);
                name[n] = '\0';
                bool last = *e == '\0';
                struct stat st;
                int fr = fstatat(cur, name, &st, AT_SYMLINK_NOFOLLOW);
                if (fr < 0 && errno != ENOENT) {
                        int saved = errno;
                        close(cur);
                        return al_error(err, -saved, NULL, "path %s: %s", s, strerror(saved));
                }
                if (fr == 0 && S_ISLNK(st.st_mode) && !(last && last_link)) {
                        close(cur);
                        return al_error(err, -ELOOP, NULL,
                                        "path %s: '%.*s' is a symbolic link in your workspace; "
                                        "links are never followed (remove it with "
                                        "workspace_remove)",
                                        s, (int)(e - path), path);
                }
                if (last) {
                        r->parent = cur;
                        r->exists = fr == 0;
                        if (fr == 0)
                                r->st = st;
                        r->done = (size_t)(c - path);
                        return 0;
                }
                if (fr < 0) {
                        /* The rest are to be made: count them. */
                        r->parent = cur;
                        r->done = (size_t)(c - path);
                        for (const char *q = c; *q; q++)
                                r->missing += *q == '/';
                        return 0;
                }
                if (!S_ISDIR(st.st_mode)) {
                        close(cur);
                        return al_error(err, -ENOTDIR, NULL,
                                        "path %s: '%.*s' is a file in your workspace, not a folder",
                                        s, (int)(e - path), path);
                }
                int next = openat(cur, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                int saved = errno;
                close(cur);
                if (next < 0)
                        return al_error(err, -saved, NULL, "path %s: %s", s, strerror(saved));
                cur = next;
                c = e + 1;
        }
}

/* ---- walking the folder ---------------------------------------------------- */

typedef struct usage {
        uint64_t entries, bytes;
        json_t *files;   /* workspace_list: [{path, size, media_type}], or NULL */
        json_t *skipped; /* ... [{path, reason}] */
        bool truncated;
        /* The walker holds the tenant's lock across hosts (tenant_lock):
         * a temporary file of a write is then a dead writer's, removed. */
        bool sweep;
        uint64_t swept; /* temporary files removed so */
} usage;

static const char *media_type(const char *name);

/* Adds what folder fd holds (prefix its path) to u. Never follows a link;
 * stops WS_WALK_DEPTH folders deep. Returns 0 or -errno. */
static int walk(int fd, const char *prefix, unsigned depth, usage *u)
{
        if (depth > WS_WALK_DEPTH)
                return -ELOOP;
        int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (dfd < 0)
                return -errno;
        DIR *d = fdopendir(dfd);
        if (!d) {
                close(dfd);
                return -errno;
        }
        int r = 0;
        struct dirent *de;
        while (r == 0 && (de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                struct stat st;
                if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* gone meanwhile */
                /* A write's temporary file is not the tenant's: a live
                 * writer counts what it writes itself, and one whose
                 * process or host died (SIGKILL mid-write) left it behind.
                 * Under the tenant's lock no writer is live, so it goes:
                 * it would count against the caps for ever. */
                if (S_ISREG(st.st_mode) &&
                    strncmp(de->d_name, WS_TMP_PREFIX, sizeof(WS_TMP_PREFIX) - 1) == 0) {
                        if (u->sweep && unlinkat(fd, de->d_name, 0) == 0)
                                u->swept++;
                        continue;
                }
                u->entries++;
                char path[WS_PATH_MAX + WS_NAME_MAX + 2];
                snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "/" : "", de->d_name);
                if (S_ISREG(st.st_mode)) {
                        u->bytes += (uint64_t)st.st_size;
                        if (u->files) {
                                if (json_array_size(u->files) >= WS_LIST_MAX)
                                        u->truncated = true;
                                else
                                        json_array_append_new(
                                            u->files,
                                            json_pack("{s:s%, s:I, s:s}", "path", path,
                                                      strlen(path), "size", (json_int_t)st.st_size,
                                                      "media_type", media_type(de->d_name)));
                        }
                } else if (S_ISDIR(st.st_mode)) {
                        int sub =
                            openat(fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (sub >= 0) {
                                r = walk(sub, path, depth + 1, u);
                                close(sub);
                        }
                } else if (u->skipped) {
                        json_array_append_new(
                            u->skipped,
                            json_pack("{s:s%, s:s}", "path", path, strlen(path), "reason",
                                      S_ISLNK(st.st_mode)
                                          ? "a symbolic link: never followed, and a run refuses "
                                            "a workspace that holds one"
                                          : "not a regular file or folder: skipped by runs"));
                }
        }
        closedir(d);
        return r;
}

/* Removes name below parent, a folder with everything in it, never
 * following a link. */
static int remove_tree(int parent, const char *name, unsigned depth)
{
        struct stat st;
        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(parent, name, 0) < 0 ? -errno : 0;
        if (depth > WS_WALK_DEPTH)
                return -ELOOP;
        int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                close(fd);
                return -ENOMEM;
        }
        int r = 0;
        struct dirent *de;
        while (r == 0 && (de = readdir(d)))
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                        r = remove_tree(fd, de->d_name, depth + 1);
        closedir(d);
        close(fd);
        if (r == 0 && unlinkat(parent, name, AT_REMOVEDIR) < 0)
                r = -errno;
        return r;
}

/* ---- media types ------------------------------------------------------------ */

typedef struct mime_entry {
        char ext[16];
        char type[80];
} mime_entry;
static mime_entry *mime_table;
static size_t mime_n;
static pthread_once_t mime_once = PTHREAD_ONCE_INIT;

/* /etc/mime.types, as the library reads it for /output (a line: a type
 * and its extensions); a name without a known extension is
 * application/octet-stream. */
static void mime_load(void)
{
        FILE *f = fopen("/etc/mime.types", "re");
        if (!f)
                return;
        size_t cap = 0;
        char line[1024];
        while (fgets(line, sizeof(line), f)) {
                if (line[0] == '#')
                        continue;
                char *save = NULL;
                char *type = strtok_r(line, " \t\r\n", &save);
                if (!type || strlen(type) >= sizeof(mime_table->type))
                        continue;
                for (char *ext; (ext = strtok_r(NULL, " \t\r\n", &save));) {
                        if (strlen(ext) >= sizeof(mime_table->ext))
                                continue;
                        if (mime_n == cap) {
                                size_t nc = cap ? 2 * cap : 512;
                                mime_entry *v = realloc(mime_table, nc * sizeof(*v));
                                if (!v)
                                        goto out;
                                mime_table = v;
                                cap = nc;
                        }
                        snprintf(mime_table[mime_n].ext, sizeof(mime_table->ext), "%s", ext);
                        snprintf(mime_table[mime_n].type, sizeof(mime_table->type), "%s", type);
                        mime_n++;
                }
        }
out:
        fclose(f);
}

static const char *media_type(const char *name)
{
        pthread_once(&mime_once, mime_load);
        const char *dot = strrchr(name, '.');
        if (dot && dot != name)
                for (size_t i = 0; i < mime_n; i++)
                        if (strcasecmp(mime_table[i].ext, dot + 1) == 0)
                                return mime_table[i].type;
        return "application/octet-stream";
}

/* ---- the tools ------------------------------------------------------------- */

/* The caps and usage in a result's structured content and text. */
static void add_usage(json_t *o, const usage *u, uint64_t max_files, uint64_t max_bytes)
{
        json_object_set_new(o, "entries", json_integer((json_int_t)u->entries));
        json_object_set_new(o, "bytes", json_integer((json_int_t)u->bytes));
        json_object_set_new(o, "max_files", json_integer((json_int_t)max_files));
        json_object_set_new(o, "max_bytes", json_integer((json_int_t)max_bytes));
}

static const char *cap_name(bool own, int which)
{
        if (which == 0)
                return own ? "max-files of your tenant" : "--workspace-max-files";
        return own ? "max-bytes of your tenant" : "--workspace-max-bytes";
}

typedef struct upload {
        const char *path;
        unsigned char *data;
        size_t len;
        resolved at;
        char tmp[sizeof(WS_TMP_PREFIX) + 32];
        int dirfd; /* the folder the file goes in, once made */
        bool written;
} upload;

static void uploads_free(upload *v, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(v[i].data);
                if (v[i].at.parent >= 0)
                        close(v[i].at.parent);
                if (v[i].dirfd >= 0)
                        close(v[i].dirfd);
        }
        free(v);
}

/* Opens the folder the file of u goes in, making the missing folders
 * (0700) below the deepest existing one. */
static int make_parents(upload *u)
{
        int cur = fcntl(u->at.parent, F_DUPFD_CLOEXEC, 0);
        if (cur < 0)
                return -errno;
        const char *c = u->path + u->at.done;
        char name[WS_NAME_MAX + 1];
        for (;;) {
                const char *e = strchr(c, '/');
                if (!e)
                        break;
                size_t n = (size_t)(e - c);
                memcpy(name, c, n);
                name[n] = '\0';
                if (mkdirat(cur, name, 0700) < 0 && errno != EEXIST) {
                        int r = -errno;
                        close(cur);
                        return r;
                }
                int next = openat(cur, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                int r = -errno;
                close(cur);
                if (next < 0)
                        return r;
                cur = next;
                c = e + 1;
        }
        u->dirfd = cur;
        return 0;
}

static const char *last_part(const char *p)
{
        const char *s = strrchr(p, '/');
        return s ? s + 1 : p;
}

/* Checks files[i] of a workspace_write call (its keys, its path) and
 * decodes its content into u. Returns NULL, or the refusal. */
static json_t *upload_parse(const json_t *f, size_t i, upload *u)
{
        airlock_error fault;
        const json_t *path = json_object_get(f, "path");
        const json_t *text = json_object_get(f, "text");
        const json_t *b64 = json_object_get(f, "base64");
        const char *key;
        const json_t *val;
        bool other = false;
        json_object_foreach ((json_t *)f, key, val)
                other |= strcmp(key, "path") && strcmp(key, "text") && strcmp(key, "base64");
        if (!json_is_object(f) || !json_is_string(path) || other ||
            !!json_is_string(text) + !!json_is_string(b64) != 1 ||
            (text && !json_is_string(text)) || (b64 && !json_is_string(b64)))
                return mcp_tool_refusal("workspace_write: files[%zu] must be {\"path\": string, "
                                        "\"text\": string} or {\"path\": string, \"base64\": "
                                        "string}; nothing was written",
                                        i);
        if (check_path(json_string_value(path), json_string_length(path), &fault) < 0)
                return mcp_tool_refusal("workspace_write: %s; nothing was written", fault.message);
        u->path = json_string_value(path);
        if (text) {
                u->len = json_string_length(text);
                u->data = malloc(u->len + 1);
                if (u->data)
                        memcpy(u->data, json_string_value(text), u->len);
        } else if (al_base64_decode(json_string_value(b64), json_string_length(b64), &u->data,
                                    &u->len) < 0) {
                char sh[256];
                shown(u->path, strlen(u->path), sh, sizeof(sh));
                return mcp_tool_refusal("workspace_write: the base64 of %s is not valid base64; "
                                        "nothing was written",
                                        sh);
        }
        if (!u->data && u->len)
                return mcp_tool_refusal("out of memory");
        return NULL;
}

/* The path of v[i] against those before it: none the same, none a folder
 * of another. Returns NULL, or the refusal. */
static json_t *upload_overlap(const upload *v, size_t i)
{
        for (size_t k = 0; k < i; k++) {
                size_t a = strlen(v[k].path), b = strlen(v[i].path);
                const char *s = a < b ? v[k].path : v[i].path;
                const char *l = a < b ? v[i].path : v[k].path;
                size_t sl = a < b ? a : b;
                char sh[256];
                shown(v[i].path, strlen(v[i].path), sh, sizeof(sh));
                if (a == b && strcmp(s, l) == 0)
                        return mcp_tool_refusal("workspace_write: path %s is given twice; nothing "
                                                "was written",
                                                sh);
                if (strncmp(s, l, sl) == 0 && l[sl] == '/')
                        return mcp_tool_refusal("workspace_write: path %s is a file and a folder "
                                                "of another file in the same call; nothing was "
                                                "written",
                                                sh);
        }
        return NULL;
}

/* What the tenant's workspace (root) would hold after the uploads, in
 * *after: no link or file on the way, no folder where a file goes; each
 * folder to make counted once. *now is what it holds. Returns NULL, or the
 * refusal. */
static json_t *uploads_measure(int root, upload *v, size_t n, bool locked, usage *now, usage *after)
{
        airlock_error fault;
        *now = (usage){.sweep = locked};
        if (walk(root, "", 0, now) < 0)
                return mcp_tool_refusal(
                    "workspace_write: your workspace is deeper than %d folders; "
                    "nothing was written",
                    WS_WALK_DEPTH);
        *after = *now;
        _cleanup_json_ json_t *made = json_object(); /* the folders this call makes */
        for (size_t i = 0; i < n; i++) {
                char s[256];
                shown(v[i].path, strlen(v[i].path), s, sizeof(s));
                if (resolve(root, v[i].path, false, &v[i].at, &fault) < 0)
                        return mcp_tool_refusal("workspace_write: %s; nothing was written",
                                                fault.message);
                if (v[i].at.exists && !S_ISREG(v[i].at.st.st_mode))
                        return mcp_tool_refusal(
                            "workspace_write: path %s is %s in your workspace, not a "
                            "file; nothing was written",
                            s, S_ISDIR(v[i].at.st.st_mode) ? "a folder" : "something");
                if (v[i].at.exists) {
                        after->bytes -= (uint64_t)v[i].at.st.st_size;
                } else {
                        after->entries++;
                        /* Each folder to make, once. */
                        for (const char *q = v[i].path + v[i].at.done; (q = strchr(q, '/')); q++) {
                                char pre[WS_PATH_MAX + 1];
                                snprintf(pre, sizeof(pre), "%.*s", (int)(q - v[i].path), v[i].path);
                                if (!json_object_get(made, pre)) {
                                        json_object_set_new(made, pre, json_true());
                                        after->entries++;
                                }
                        }
                }
                after->bytes += v[i].len;
        }
        return NULL;
}

/* Writes every upload to a temporary name in its folder, and only then
 * renames each to its own; on failure removes the temporary files. Returns
 * 0 or -errno. */
static int uploads_commit(upload *v, size_t n)
{
        int err = 0;
        for (size_t i = 0; i < n && !err; i++) {
                err = make_parents(&v[i]);
                unsigned char rnd[12];
                if (!err && getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
                        err = -EIO;
                if (err)
                        break;
                char *t = stpcpy(v[i].tmp, WS_TMP_PREFIX);
                for (size_t k = 0; k < sizeof(rnd); k++)
                        t += sprintf(t, "%02x", rnd[k]);
                int fd = openat(v[i].dirfd, v[i].tmp,
                                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0) {
                        err = -errno;
                        break;
                }
                v[i].written = true;
                err = al_write_full(fd, v[i].data, v[i].len);
                if (close(fd) < 0 && !err)
                        err = -errno;
        }
        for (size_t i = 0; i < n && !err; i++)
                if (renameat(v[i].dirfd, v[i].tmp, v[i].dirfd, last_part(v[i].path)) < 0)
                        err = -errno;
                else
                        v[i].written = false;
        if (err)
                for (size_t i = 0; i < n; i++)
                        if (v[i].written)
                                (void)unlinkat(v[i].dirfd, v[i].tmp, 0);
        return err;
}

/* The success of a workspace_write that wrote n files (new_bytes in all)
 * and left the workspace holding after. */
static json_t *written_result(const upload *v, size_t n, uint64_t new_bytes, const usage *after,
                              uint64_t max_files, uint64_t max_bytes)
{
        json_t *written = json_array();
        for (size_t i = 0; i < n; i++)
                json_array_append_new(written, json_pack("{s:s, s:I}", "path", v[i].path, "size",
                                                         (json_int_t)v[i].len));
        json_t *st = json_pack("{s:o}", "written", written);
        add_usage(st, after, max_files, max_bytes);
        char text[512];
        snprintf(text, sizeof(text),
                 "Wrote %zu file%s (%llu bytes) to your workspace. It holds %llu files and "
                 "folders (limit %llu) and %llu bytes (limit %llu). The next run and every "
                 "session opened from now on see them under /input; an open session keeps the "
                 "files it opened with.",
                 n, n == 1 ? "" : "s", (unsigned long long)new_bytes,
                 (unsigned long long)after->entries, (unsigned long long)max_files,
                 (unsigned long long)after->bytes, (unsigned long long)max_bytes);
        return success(text, st);
}

/* Writes the uploads into the tenant's workspace, all or nothing, under the
 * tenant's lock. Returns the result or the refusal. */
static json_t *uploads_write(mcp_workspaces *w, const char *tenant, upload *v, size_t n,
                             uint64_t new_bytes)
{
        airlock_error fault;
        json_t *res = NULL;
        ws_held held;
        if (tenant_lock(w, tenant, &held, &fault) < 0)
                return mcp_tool_refusal("workspace_write: %s; nothing was written", fault.message);
        int root = tenant_dir(w, tenant, true, &fault);
        if (root < 0) {
                res = mcp_tool_refusal("workspace_write: %s; nothing was written", fault.message);
                goto out;
        }
        usage now, after;
        if ((res = uploads_measure(root, v, n, held.fd >= 0, &now, &after)))
                goto out;
        uint64_t max_files, max_bytes;
        bool own[2];
        caps_of(w, tenant, &max_files, &max_bytes, own);
        if (after.entries > max_files)
                res = mcp_tool_refusal(
                    "workspace_write: your workspace would hold %llu files and folders, "
                    "more than your limit of %llu (%s); it holds %llu now. Remove some "
                    "with workspace_remove; nothing was written",
                    (unsigned long long)after.entries, (unsigned long long)max_files,
                    cap_name(own[0], 0), (unsigned long long)now.entries);
        else if (after.bytes > max_bytes)
                res = mcp_tool_refusal(
                    "workspace_write: your workspace would hold %llu bytes, more than "
                    "your limit of %llu (%s); it holds %llu now. Remove some with "
                    "workspace_remove; nothing was written",
                    (unsigned long long)after.bytes, (unsigned long long)max_bytes,
                    cap_name(own[1], 1), (unsigned long long)now.bytes);
        if (res)
                goto out;
        int err = uploads_commit(v, n);
        /* What the write touched, for the other hosts' next calls: each
         * file, with the hash and size of what it wrote, so that they read
         * that file alone and check it; everything when it made folders (a
         * new folder is a change of its parent's folders, which only a
         * full walk follows) or swept a dead writer's temporary file. */
        tenant_gen_change ch = {.all = now.swept > 0 || err != 0};
        for (size_t i = 0; i < n && !ch.all; i++)
                if (v[i].at.missing > 0)
                        ch.all = true;
                else
                        tenant_gen_change_add_file(&ch, v[i].path, v[i].data, v[i].len);
        gen_bump(w, tenant, held.fd, &ch);
        tenant_gen_change_free(&ch);
        if (err)
                res = mcp_tool_refusal("workspace_write: the server could not write the files: %s",
                                       strerror(-err));
        else
                res = written_result(v, n, new_bytes, &after, max_files, max_bytes);
out:
        if (root >= 0)
                close(root);
        tenant_unlock(&held);
        return res;
}

json_t *mcp_workspace_write(mcp_workspaces *w, const char *tenant, const json_t *args)
{
        /* An array of 1 to 1000 items: the tool table's schema says
         * so (mcp_tool_check). */
        const json_t *files = json_object_get(args, "files");
        size_t n = json_array_size(files);
        json_t *res = NULL;
        upload *v = calloc(n, sizeof(*v));
        if (!v)
                return mcp_tool_refusal("out of memory");
        for (size_t i = 0; i < n; i++)
                v[i].at.parent = v[i].dirfd = -1;
        uint64_t new_bytes = 0;
        /* Every path and content is checked before the disk is looked at. */
        for (size_t i = 0; i < n && !res; i++) {
                res = upload_parse(json_array_get(files, i), i, &v[i]);
                if (!res) {
                        new_bytes += v[i].len;
                        res = upload_overlap(v, i);
                }
        }
        if (!res)
                res = uploads_write(w, tenant, v, n, new_bytes);
        uploads_free(v, n);
        return res;
}

json_t *mcp_workspace_remove(mcp_workspaces *w, const char *tenant, const json_t *args)
{
        /* An array of 1 to 1000 items: the tool table's schema says
         * so (mcp_tool_check). */
        const json_t *paths = json_object_get(args, "paths");
        size_t n = json_array_size(paths);
        airlock_error fault;
        for (size_t i = 0; i < n; i++) {
                const json_t *p = json_array_get(paths, i);
                if (!json_is_string(p))
                        return mcp_tool_refusal(
                            "workspace_remove: paths[%zu] is not a string; nothing was "
                            "removed",
                            i);
                if (check_path(json_string_value(p), json_string_length(p), &fault) < 0)
                        return mcp_tool_refusal("workspace_remove: %s; nothing was removed",
                                                fault.message);
        }
        json_t *res = NULL;
        resolved *at = calloc(n, sizeof(*at));
        for (size_t i = 0; at && i < n; i++)
                at[i].parent = -1;
        ws_held held = {.fd = -1};
        int root = !at ? -ENOMEM
                   : tenant_lock(w, tenant, &held, &fault) < 0
                       ? -ENOLCK
                       : tenant_dir(w, tenant, true, &fault);
        if (root < 0) {
                res = mcp_tool_refusal("workspace_remove: %s; nothing was removed",
                                       at ? fault.message : "out of memory");
                goto out;
        }
        for (size_t i = 0; i < n && !res; i++) {
                const char *p = json_string_value(json_array_get(paths, i));
                char s[256];
                shown(p, strlen(p), s, sizeof(s));
                int r = resolve(root, p, true, &at[i], &fault);
                /* The last part may be a link: it is removed, not followed. */
                if (r < 0)
                        res = mcp_tool_refusal("workspace_remove: %s; nothing was removed",
                                               fault.message);
                else if (!at[i].exists)
                        res = mcp_tool_refusal(
                            "workspace_remove: %s is not in your workspace; nothing "
                            "was removed",
                            s);
        }
        if (res)
                goto out;
        int err = 0;
        json_t *removed = json_array();
        for (size_t i = 0; i < n; i++) {
                const char *p = json_string_value(json_array_get(paths, i));
                int r = remove_tree(at[i].parent, last_part(p), 0);
                if (r == -ENOENT) /* named twice, or inside a folder removed before */
                        r = 0;
                if (r < 0 && !err)
                        err = r;
                json_array_append_new(removed, json_string(p));
        }
        /* The sweep of dead writers' temporary files before the bump, so
         * that the generation covers it too. */
        usage u = {.sweep = held.fd >= 0};
        (void)walk(root, "", 0, &u);
        /* What the removal touched: each file; everything when a folder
         * went (the set of folders changed), the sweep removed a file, or
         * a removal failed (what is left is not known here). */
        tenant_gen_change ch = {.all = u.swept > 0 || err != 0};
        for (size_t i = 0; i < n && !ch.all; i++) {
                if (S_ISDIR(at[i].st.st_mode))
                        ch.all = true;
                else
                        tenant_gen_change_add_removed(&ch,
                                                      json_string_value(json_array_get(paths, i)));
        }
        gen_bump(w, tenant, held.fd, &ch);
        tenant_gen_change_free(&ch);
        uint64_t max_files, max_bytes;
        bool own[2];
        caps_of(w, tenant, &max_files, &max_bytes, own);
        if (err) {
                json_decref(removed);
                res = mcp_tool_refusal(
                    "workspace_remove: the server could not remove everything: %s", strerror(-err));
                goto out;
        }
        json_t *st = json_pack("{s:o}", "removed", removed);
        add_usage(st, &u, max_files, max_bytes);
        char text[512];
        snprintf(text, sizeof(text),
                 "Removed %zu path%s from your workspace. It holds %llu files and folders and "
                 "%llu bytes.",
                 n, n == 1 ? "" : "s", (unsigned long long)u.entries, (unsigned long long)u.bytes);
        res = success(text, st);
out:
        for (size_t i = 0; at && i < n; i++)
                if (at[i].parent >= 0)
                        close(at[i].parent);
        free(at);
        if (root >= 0)
                close(root);
        tenant_unlock(&held);
        return res;
}

static int by_path(const void *a, const void *b)
{
        const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
        return strcmp(json_string_value(json_object_get(x, "path")),
                      json_string_value(json_object_get(y, "path")));
}

json_t *mcp_workspace_list(mcp_workspaces *w, const char *tenant, const json_t *args)
{
        (void)args;
        airlock_error fault;
        ws_held held;
        int root = -1;
        if (tenant_lock(w, tenant, &held, &fault) < 0 ||
            (root = tenant_dir(w, tenant, true, &fault)) < 0) {
                tenant_unlock(&held);
                return mcp_tool_refusal("workspace_list: %s", fault.message);
        }
        usage u = {.files = json_array(), .skipped = json_array(), .sweep = held.fd >= 0};
        int r = walk(root, "", 0, &u);
        close(root);
        tenant_unlock(&held);
        uint64_t max_files, max_bytes;
        bool own[2];
        caps_of(w, tenant, &max_files, &max_bytes, own);
        /* Sorted by path, as a run's /output files are. */
        size_t n = json_array_size(u.files);
        json_t **items = n ? malloc(n * sizeof(*items)) : NULL;
        json_t *sorted = json_array();
        if (items) {
                for (size_t i = 0; i < n; i++)
                        items[i] = json_incref(json_array_get(u.files, i));
                qsort(items, n, sizeof(*items), by_path);
                for (size_t i = 0; i < n; i++)
                        json_array_append_new(sorted, items[i]);
                free(items);
        }
        json_decref(u.files);
        json_t *st = json_pack("{s:o, s:o, s:b}", "files", sorted, "skipped", u.skipped,
                               "truncated", u.truncated || r < 0);
        add_usage(st, &u, max_files, max_bytes);
        char text[8192];
        size_t k = (size_t)snprintf(text, sizeof(text),
                                    "Your workspace (/input in runs) holds %zu file%s, %llu bytes "
                                    "(limits: %llu files and folders, %llu bytes)%s",
                                    n, n == 1 ? "" : "s", (unsigned long long)u.bytes,
                                    (unsigned long long)max_files, (unsigned long long)max_bytes,
                                    n ? ":" : ".");
        size_t i;
        json_t *f;
        json_array_foreach (sorted, i, f) {
                if (k + 300 >= sizeof(text)) {
                        k += (size_t)snprintf(text + k, sizeof(text) - k,
                                              "\n... and %zu more (structuredContent has all)",
                                              n - i);
                        break;
                }
                k += (size_t)snprintf(text + k, sizeof(text) - k, "\n- %.200s (%lld bytes, %s)",
                                      json_string_value(json_object_get(f, "path")),
                                      (long long)json_integer_value(json_object_get(f, "size")),
                                      json_string_value(json_object_get(f, "media_type")));
        }
        return success(text, st);
}
