/* Change detection with inotify for the trees of a workspace and its mounts.
 *
 * The watches are set by the signature walk itself, on the directory fds it
 * opened safely (beneath their parent, no link followed, on the root's
 * device), before each directory is listed. So every change either comes
 * after its directory's watch was set, and shows as an event, or before,
 * and shows in the walk's listing and signature. A walk always starts from a
 * new inotify instance: a directory moved out of the tree keeps no watch
 * (none ever outlives the walk that found it inside), and a directory moved
 * in gets one, because the move itself is an event that makes the next call
 * walk again.
 *
 * What inotify does not report, and the safety-net walk (every
 * FSX_WATCH_PERIOD_NS) catches: writes through a shared mmap, changes made
 * on another machine of a network file system (NFS, SMB, FUSE servers), and
 * writes to a file through a hard link that lives outside the tree (events
 * go to the watches of the directory the writer named).
 *
 * Shared storage: a tree whose root is on a network or FUSE file system
 * (fsx_remote_fs) is one that other machines may change, and their changes
 * never show as events here. Such a set of trees is walked at every call
 * while it holds at most FSX_SHARED_WALK_MAX entries, so that a change
 * finished on another machine before a call began is in that call's
 * signature; a larger one keeps its watches (this machine's changes) and
 * counts on its caller (fsx_watch_changed_in with the folders a tenant's
 * generation record names, or fsx_watch_invalidate when it cannot tell,
 * which the MCP server calls when a tenant's generation file moved) and
 * the safety walk, whose period there is at least ten times the last full
 * walk (safety_period). The walk at
 * every call reads metadata only (meta_digest: a lookup per entry, no file
 * opened), and the signature walk follows only when that differs from
 * what it was just before the last signature walk began. */
#include "fsx/fsx_watch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"

/* Everything that changes what staging would copy: content, metadata,
 * entries appearing, going or moving, and the watched object itself going
 * or moving. IN_EXCL_UNLINK: a file unlinked while open elsewhere no longer
 * reports. No IN_DONT_FOLLOW: the watch is set through /proc/self/fd/N, a
 * magic link that must be followed to reach the fd's own file (with the
 * flag the kernel watches the link and IN_ONLYDIR fails with ENOTDIR); that
 * link names exactly the checked fd, so no path is resolved again. */
#define WATCH_EVENTS                                                                               \
        (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_DELETE | IN_DELETE_SELF |         \
         IN_MOVE_SELF | IN_MOVED_FROM | IN_MOVED_TO | IN_EXCL_UNLINK)

typedef struct tree_root {
        dev_t dev;
        ino_t ino;
        mode_t type; /* S_IFMT bits */
        bool known;
        /* For signing single directories again: the root as the walk opened
         * it (-1 for a file root or without watches), the walk's state, and
         * the directories events named since. */
        int fd;
        fsx_sig_state sig;
        bool *dirty;
        int last_wd;
        bool wd_order;  /* watch descriptors rose with the walk's order */
        bool shared;    /* on a network or FUSE file system (fsx_remote_fs) */
        const char *fs; /* its short name */
} tree_root;

/* Events naming more directories than this make a full walk: signing them
 * one by one would cost about as much. */
#define DIRTY_MAX 64
/* Bytes of events read at one call before giving up and walking. */
#define EVENTS_MAX (256u * 1024)
/* Changes kept for fsx_watch_delta, and directories one may name. */
#define DELTA_HISTORY  8
#define DELTA_DIRS_MAX 256

struct fsx_watch {
        pthread_mutex_t lock;
        char **paths;
        size_t n;
        fsx_limits lim;
        uint64_t threshold;
        unsigned max_watches;
        uint64_t period_ns;

        int ifd;    /* the inotify instance of the last walk, or -1 */
        bool valid; /* hex and roots are the last walk's, and ifd covers it all */
        unsigned watches;
        char (*hex)[FSX_SIGNATURE_HEX];
        tree_root *roots;
        uint64_t last_walk_ns; /* when the last full walk ended */
        uint64_t walk_ns;      /* how long it took */
        uint64_t last_try_ns;  /* when watches were last attempted */
        bool failed;           /* the last attempt could not watch everything */
        char reason[256];
        uint64_t walks, checks, partial;
        uint64_t shared_max; /* FSX_SHARED_WALK_MAX, or a test's lower value */
        uint64_t entries;    /* what the last walk listed, every tree */
        bool shared;         /* a root of the last walk is on shared storage */
        const char *fs;      /* the first such root's file system */
        uint64_t meta;       /* meta_digest taken before the last signature walk */
        bool meta_valid;     /* ... and that walk succeeded */

        /* Directories of tree 0 a caller said changed (fsx_watch_changed_in),
         * signed again at the next call; at most DIRTY_MAX. */
        char **told;
        size_t n_told;
        /* Files a caller said changed (fsx_watch_files_changed), read again
         * at the next call; at most DIRTY_MAX. */
        fsx_file_change *told_files;
        size_t n_told_files;
        /* The bytes of the told files the last of them read, which are
         * the version signed kept_to: for its staging (fsx_watch_hashes). */
        fsx_hashes kept;
        char kept_to[FSX_SIGNATURE_HEX];
        /* Tree 0's part of meta (a single tree): the sum and count of its
         * entries' hashes, for checking a told change against it. */
        uint64_t meta_sum, meta_count;

        /* The background walk (fsx_watch_background), on shared storage:
         * whether a walker serves this watcher, whether its walk is running
         * (and since when), when the walk whose result the state is began
         * (verified_ns: every change finished before it is in the state)
         * and when the last walk ended (checked_ns, from which the next is
         * due), how long the last metadata walk took, the directories
         * callers named while the walk ran (told again when its result is
         * taken), and whether the state moved under it in a way its result
         * cannot stand for (a full walk or an invalidation meanwhile). */
        bool bg;
        bool bg_running;
        uint64_t bg_start_ns;
        uint64_t verified_ns, checked_ns, meta_ns;
        char **bg_told;
        size_t n_bg_told;
        bool bg_lost;
        uint64_t bg_walks;
        atomic_bool bg_stop; /* fsx_watch_stop_background: the walk gives up */
        /* A background walk's own watcher: its owner's bg_stop, which
         * stops its full walk at the next entry (NULL for any other). */
        const atomic_bool *walk_stop;

        /* During a walk: the tree being walked, and whether a watch failed. */
        size_t cur;
        bool walk_failed;

        /* The last changes of a single tree (a workspace without mounts):
         * which directories' digests differed between two signatures, for
         * fsx_watch_delta. Oldest first. */
        struct watch_delta {
                char from[FSX_SIGNATURE_HEX], to[FSX_SIGNATURE_HEX];
                char **dirs;
                size_t n;
                char **files; /* a change told file by file: those files alone */
                size_t n_files;
        } hist[DELTA_HISTORY];
        size_t n_hist;
};

static void delta_free(struct watch_delta *d)
{
        for (size_t i = 0; i < d->n; i++)
                free(d->dirs[i]);
        free(d->dirs);
        d->dirs = NULL;
        d->n = 0;
        for (size_t i = 0; i < d->n_files; i++)
                free(d->files[i]);
        free(d->files);
        d->files = NULL;
        d->n_files = 0;
}

static void history_clear(fsx_watch *w)
{
        for (size_t i = 0; i < w->n_hist; i++)
                delta_free(&w->hist[i]);
        w->n_hist = 0;
}

static void strv_clear(char ***v, size_t *n)
{
        for (size_t i = 0; i < *n; i++)
                free((*v)[i]);
        free(*v);
        *v = NULL;
        *n = 0;
}

static void told_clear(fsx_watch *w)
{
        strv_clear(&w->told, &w->n_told);
}

/* Adds dir to the list *v of *n (once), at most DIRTY_MAX: -1 past it or
 * out of memory. */
static int strv_add(char ***v, size_t *n, const char *dir)
{
        for (size_t k = 0; k < *n; k++)
                if (strcmp((*v)[k], dir) == 0)
                        return 0;
        char **nv = *n < DIRTY_MAX ? realloc(*v, (*n + 1) * sizeof(*nv)) : NULL;
        if (!nv)
                return -1;
        *v = nv;
        if (!(nv[*n] = strdup(dir)))
                return -1;
        (*n)++;
        return 0;
}

static void told_files_clear(fsx_watch *w)
{
        for (size_t i = 0; i < w->n_told_files; i++)
                free((char *)w->told_files[i].rel);
        free(w->told_files);
        w->told_files = NULL;
        w->n_told_files = 0;
}

/* Appends d to the history, the oldest going past DELTA_HISTORY. */
static void history_push(fsx_watch *w, struct watch_delta *d)
{
        if (w->n_hist == DELTA_HISTORY) {
                delta_free(&w->hist[0]);
                memmove(w->hist, w->hist + 1, (DELTA_HISTORY - 1) * sizeof(*w->hist));
                w->n_hist--;
        }
        w->hist[w->n_hist++] = *d;
}

/* Appends d, the change from `from` to `to`, to the history when ok; else
 * frees d and drops the history, which can no longer say what changed. */
static void history_record(fsx_watch *w, struct watch_delta *d, bool ok, const char *from,
                           const char *to)
{
        if (!ok) {
                delta_free(d);
                history_clear(w);
                return;
        }
        memcpy(d->from, from, FSX_SIGNATURE_HEX);
        memcpy(d->to, to, FSX_SIGNATURE_HEX);
        history_push(w, d);
}

/* Records that tree 0's signature went from `from` to `to` by the change
 * of the files v alone (fsx_tree_signature_files). */
static void history_add_files(fsx_watch *w, const char *from, const char *to,
                              const fsx_file_change *v, size_t n)
{
        if (w->n != 1 || strcmp(from, to) == 0)
                return;
        struct watch_delta d = {.files = calloc(n, sizeof(char *))};
        bool ok = d.files != NULL;
        for (size_t i = 0; ok && i < n; i++)
                ok = (d.files[d.n_files++] = strdup(v[i].rel)) != NULL;
        history_record(w, &d, ok, from, to);
}

/* Records that tree 0's signature went from `from` to `to`, the
 * directories old_hex[k] != state's for k in idx[0..n-1] (or every one when
 * idx is NULL) having changed; with old_rel (may be NULL) the directory
 * list of the signature before, which must be the one of now (else the set
 * of directories changed: nothing is recorded, and the history goes). */
static void history_add(fsx_watch *w, const char *from, const char *to, const fsx_sig_state *old,
                        const size_t *idx, size_t n_idx, char (*old_hex)[33])
{
        if (w->n != 1 || strcmp(from, to) == 0)
                return;
        const fsx_sig_state *now = &w->roots[0].sig;
        struct watch_delta d = {0};
        bool ok = now->is_dir;
        if (ok && old) {
                ok = old->is_dir && old->n == now->n;
                for (size_t k = 0; ok && k < now->n; k++)
                        ok = strcmp(old->dirs[k].rel, now->dirs[k].rel) == 0;
        }
        size_t total = idx ? n_idx : now->n;
        for (size_t j = 0; ok && j < total; j++) {
                size_t k = idx ? idx[j] : j;
                const char *was = idx ? old_hex[j] : old->dirs[k].hex;
                if (strcmp(was, now->dirs[k].hex) == 0)
                        continue;
                if (d.n == DELTA_DIRS_MAX) {
                        ok = false;
                        break;
                }
                char **nv = realloc(d.dirs, (d.n + 1) * sizeof(*nv));
                if (!nv || !(nv[d.n] = strdup(now->dirs[k].rel))) {
                        if (nv)
                                d.dirs = nv;
                        ok = false;
                        break;
                }
                d.dirs = nv;
                d.n++;
        }
        history_record(w, &d, ok, from, to);
}

/* Adds a copy of v to *list (*n entries) unless it is there. 0 or -1. */
static int list_add_once(char ***list, size_t *n, const char *v)
{
        for (size_t j = 0; j < *n; j++)
                if (strcmp((*list)[j], v) == 0)
                        return 0;
        char **nv = realloc(*list, (*n + 1) * sizeof(*nv));
        if (!nv)
                return -1;
        *list = nv;
        if (!(nv[*n] = strdup(v)))
                return -1;
        (*n)++;
        return 0;
}

static void list_free(char **list, size_t n)
{
        for (size_t j = 0; j < n; j++)
                free(list[j]);
        free(list);
}

int fsx_watch_delta(fsx_watch *w, const char *from, const char *to, char ***ret_dirs, size_t *ret_n,
                    char ***ret_files, size_t *ret_nf)
{
        *ret_dirs = *ret_files = NULL;
        *ret_n = *ret_nf = 0;
        pthread_mutex_lock(&w->lock);
        size_t i = 0;
        while (i < w->n_hist && strcmp(w->hist[i].from, from) != 0)
                i++;
        char **dirs = NULL, **files = NULL;
        size_t n = 0, nf = 0;
        int found = 0;
        for (; i < w->n_hist && !found; i++) {
                /* Consecutive changes only: each from the one before. */
                if ((n || nf) && strcmp(w->hist[i].from, w->hist[i - 1].to) != 0)
                        break;
                for (size_t k = 0; k < w->hist[i].n && !found; k++)
                        if (list_add_once(&dirs, &n, w->hist[i].dirs[k]) < 0)
                                found = -1;
                for (size_t k = 0; k < w->hist[i].n_files && !found; k++)
                        if (list_add_once(&files, &nf, w->hist[i].files[k]) < 0)
                                found = -1;
                if (!found && strcmp(w->hist[i].to, to) == 0)
                        found = 1;
        }
        pthread_mutex_unlock(&w->lock);
        if (found == 1 && !dirs && !(dirs = calloc(1, sizeof(*dirs))))
                found = -1;
        if (found != 1) {
                list_free(dirs, n);
                list_free(files, nf);
                return 0;
        }
        *ret_dirs = dirs;
        *ret_n = n;
        *ret_files = files;
        *ret_nf = nf;
        return 1;
}

int fsx_watch_new(const char *const *paths, size_t n, const fsx_limits *lim,
                  uint64_t content_threshold, fsx_watch **ret, airlock_error *err)
{
        if (!lim || (n && !paths))
                return al_error(err, -EINVAL, NULL, "watch: missing argument");
        fsx_watch *w = calloc(1, sizeof(*w));
        if (!w)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        w->ifd = -1;
        w->n = n;
        w->lim = *lim;
        w->threshold = content_threshold;
        w->max_watches = FSX_WATCH_MAX_DEFAULT;
        w->period_ns = FSX_WATCH_PERIOD_NS;
        w->shared_max = FSX_SHARED_WALK_MAX;
        pthread_mutex_init(&w->lock, NULL);
        w->paths = calloc(n ? n : 1, sizeof(*w->paths));
        w->hex = calloc(n ? n : 1, sizeof(*w->hex));
        w->roots = calloc(n ? n : 1, sizeof(*w->roots));
        bool ok = w->paths && w->hex && w->roots;
        for (size_t i = 0; ok && i < n; i++)
                w->roots[i].fd = -1;
        for (size_t i = 0; ok && i < n; i++)
                ok = (w->paths[i] = strdup(paths[i])) != NULL;
        if (!ok) {
                fsx_watch_free(w);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        *ret = w;
        return 0;
}

void fsx_watch_set_knobs(fsx_watch *w, unsigned max_watches, uint64_t period_ns)
{
        pthread_mutex_lock(&w->lock);
        if (max_watches)
                w->max_watches = max_watches;
        if (period_ns)
                w->period_ns = period_ns;
        /* The next call walks again under the new rules. */
        w->valid = false;
        w->meta_valid = false;
        w->bg_lost = true;
        w->failed = false;
        pthread_mutex_unlock(&w->lock);
}

static void drop_tree_state(tree_root *t)
{
        if (t->fd >= 0)
                close(t->fd);
        t->fd = -1;
        fsx_sig_state_free(&t->sig);
        free(t->dirty);
        t->dirty = NULL;
        t->last_wd = 0;
        t->wd_order = true;
}

static void drop_watches(fsx_watch *w)
{
        if (w->ifd >= 0)
                close(w->ifd);
        w->ifd = -1;
        w->watches = 0;
        w->valid = false;
        for (size_t i = 0; w->roots && i < w->n; i++)
                drop_tree_state(&w->roots[i]);
}

/* Records why the trees are walked at every call; the first reason of a
 * walk stays. */
static void watch_failed(fsx_watch *w, const char *fmt, ...) _printf_(2, 3);
static void watch_failed(fsx_watch *w, const char *fmt, ...)
{
        if (w->walk_failed)
                return;
        w->walk_failed = true;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->reason, sizeof(w->reason), fmt, ap);
        va_end(ap);
}

/* The signature walk's hook: records the root's identity and sets a watch
 * on the fd the walk just opened and checked. fd is the walk's own (opened
 * with fsx_open_beneath: openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
 * RESOLVE_NO_MAGICLINKS, O_NOFOLLOW|O_DIRECTORY, and checked to be on the
 * root's device), so the watch lands on a directory inside the tree,
 * whatever the path names by now. */
static int on_entered(void *ctx, int fd, const struct stat *st, bool is_root)
{
        fsx_watch *w = ctx;
        tree_root *t = &w->roots[w->cur];
        if (is_root) {
                t->dev = st->st_dev;
                t->ino = st->st_ino;
                t->type = st->st_mode & S_IFMT;
                t->known = true;
                t->shared = fsx_remote_fs(fd, &t->fs);
                if (S_ISDIR(st->st_mode) && w->ifd >= 0 && t->fd < 0)
                        t->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        }
        if (w->walk_failed || w->ifd < 0)
                return -1;
        if (w->watches >= w->max_watches) {
                watch_failed(w,
                             "the workspace and mounts hold more than %u directories to watch "
                             "(the watch cap): every call walks the trees",
                             w->max_watches);
                return -1;
        }
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        uint32_t mask = WATCH_EVENTS | (S_ISDIR(st->st_mode) ? IN_ONLYDIR : 0);
        int wd = inotify_add_watch(w->ifd, proc, mask);
        if (wd >= 0) {
                w->watches++;
                /* The same wd twice (one inode met twice) or out of order:
                 * events cannot be mapped back to one directory. */
                if (wd <= t->last_wd)
                        t->wd_order = false;
                t->last_wd = wd;
                return wd;
        }
        if (errno == ENOSPC)
                watch_failed(w, "the per-user inotify watch limit (fs.inotify.max_user_watches) is "
                                "reached: every call walks the trees");
        else
                watch_failed(w,
                             "cannot watch the workspace (inotify_add_watch: %s): every call "
                             "walks the trees",
                             strerror(errno));
        return -1;
}

enum { UNCHANGED, DIRS_CHANGED, WALK };

/* The index in t's walk of the directory whose watch is wd, or t->sig.n.
 * The wds rose with the walk's order: a binary search. */
static size_t dir_of_wd(const tree_root *t, int wd)
{
        size_t lo = 0, hi = t->sig.n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (t->sig.dirs[mid].wd < wd)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo < t->sig.n && t->sig.dirs[lo].wd == wd ? lo : t->sig.n;
}

/* Marks the directory an event's wd names as dirty. WALK when it cannot:
 * no such watch, wds not in the walk's order, too many directories. */
static int mark_dirty(fsx_watch *w, int wd, unsigned *n_dirty)
{
        /* Every tree that holds the directory: one directory can be both in
         * the workspace and a mount (inotify gives one inode one wd). */
        bool found = false;
        for (size_t i = 0; i < w->n; i++) {
                tree_root *t = &w->roots[i];
                if (!t->sig.n || t->fd < 0 || !t->wd_order)
                        continue;
                size_t lo = dir_of_wd(t, wd);
                if (lo == t->sig.n)
                        continue;
                if (!t->dirty && !(t->dirty = calloc(t->sig.n, sizeof(*t->dirty))))
                        return WALK;
                found = true;
                if (!t->dirty[lo]) {
                        t->dirty[lo] = true;
                        if (++*n_dirty > DIRTY_MAX)
                                return WALK;
                }
        }
        return found ? DIRS_CHANGED : WALK;
}

/* A name of a folder of told files that events named, while they are
 * weighed (told_event): the mask of its first event and of its last. */
typedef struct told_name {
        int wd;
        uint32_t first, last;
        char name[NAME_MAX + 1];
} told_name;

typedef struct told_names {
        told_name *v;
        size_t n;
} told_names;

/* Whether the event ev falls to the files a caller told changed
 * (fsx_watch_files_changed), which the call reads alone and checks against
 * their writer's word (apply_told_files), with their folders' own metadata
 * read again: the writer's own change on this host shows as events too
 * (its temporary file made, written and renamed onto the told name), and
 * must not make the call sign the whole folder again. 1: an event on a
 * told file (nothing to mark), or on another name of a told file's folder,
 * kept in *names to weigh once every event is read (see told_settle); 0:
 * anything else, marked as usual. Single trees only. */
static int told_event(fsx_watch *w, const struct inotify_event *ev, told_names *names)
{
        const tree_root *t = &w->roots[0];
        if (!w->n_told_files || w->n != 1 || !ev->len || (ev->mask & IN_ISDIR) || !t->wd_order)
                return 0;
        size_t k = dir_of_wd(t, ev->wd);
        if (k == t->sig.n || !t->sig.dirs[k].rel)
                return 0;
        const char *rel = t->sig.dirs[k].rel;
        size_t rl = strlen(rel);
        bool folder = false;
        for (size_t i = 0; i < w->n_told_files; i++) {
                const char *f = w->told_files[i].rel;
                const char *slash = strrchr(f, '/');
                size_t fl = slash ? (size_t)(slash - f) : 0;
                if (fl != rl || memcmp(f, rel, rl) != 0)
                        continue;
                folder = true;
                if (strcmp(slash ? slash + 1 : f, ev->name) == 0)
                        return 1;
        }
        if (!folder)
                return 0;
        size_t j = 0;
        while (j < names->n && (names->v[j].wd != ev->wd || strcmp(names->v[j].name, ev->name)))
                j++;
        if (j == names->n) {
                if (names->n == DIRTY_MAX || strlen(ev->name) > NAME_MAX)
                        return 0;
                if (!names->v && !(names->v = calloc(DIRTY_MAX, sizeof(*names->v))))
                        return 0;
                names->v[j].wd = ev->wd;
                names->v[j].first = ev->mask;
                snprintf(names->v[j].name, sizeof(names->v[j].name), "%s", ev->name);
                names->n++;
        }
        names->v[j].last = ev->mask;
        return 1;
}

/* Marks dirty the folders of the names told_event kept, but for a name
 * that was made after the last walk and is gone again (its first event
 * IN_CREATE, its last IN_DELETE or IN_MOVED_FROM): the writer's temporary
 * file, which leaves the folder's listing as it was. DIRS_CHANGED when a
 * folder was marked, WALK when one cannot be, else state. */
static int told_settle(fsx_watch *w, told_names *names, unsigned *n_dirty, int state)
{
        for (size_t j = 0; j < names->n && state != WALK; j++) {
                const told_name *o = &names->v[j];
                if ((o->first & IN_CREATE) && (o->last & (IN_DELETE | IN_MOVED_FROM)))
                        continue;
                state = mark_dirty(w, o->wd, n_dirty) == WALK ? WALK : DIRS_CHANGED;
        }
        free(names->v);
        *names = (told_names){0};
        return state;
}

/* Reads the queued events: UNCHANGED when there are none and (with
 * roots) every root path still names the inode the walk started from; DIRS_CHANGED when the
 * events only name files (and the metadata) of known directories, now
 * marked dirty; WALK for anything else: the queue overflowed, a watch went
 * (IN_IGNORED), a directory was created, deleted or moved in or out of one
 * (the set of directories changed), a watched directory itself moved or
 * went, too many events or directories, a read error, or a root path that
 * names another inode (an ancestor renamed, the root replaced by a link). */
static int check_events(fsx_watch *w, bool roots)
{
        char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
        unsigned n_dirty = 0;
        size_t total = 0;
        int state = UNCHANGED;
        told_names names = {0};
        for (;;) {
                ssize_t r = read(w->ifd, buf, sizeof(buf));
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0 && errno == EAGAIN)
                        break;
                total += r > 0 ? (size_t)r : 0;
                if (r <= 0 || total > EVENTS_MAX)
                        state = WALK;
                for (ssize_t off = 0; state != WALK && off < r;) {
                        const struct inotify_event *ev = (const void *)(buf + off);
                        off += (ssize_t)(sizeof(*ev) + ev->len);
                        uint32_t m = ev->mask;
                        if ((m & (IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF |
                                  IN_UNMOUNT)) ||
                            ((m & IN_ISDIR) &&
                             (m & (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO))))
                                state = WALK;
                        else if (told_event(w, ev, &names))
                                continue;
                        else if (mark_dirty(w, ev->wd, &n_dirty) == WALK)
                                state = WALK;
                        else
                                state = DIRS_CHANGED;
                }
                if (state == WALK)
                        break;
        }
        state = told_settle(w, &names, &n_dirty, state);
        if (state == WALK)
                return WALK;
        for (size_t i = 0; roots && i < w->n; i++) {
                struct stat st;
                if (fstatat(AT_FDCWD, w->paths[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
                        return WALK;
                const tree_root *t = &w->roots[i];
                if (!t->known || st.st_dev != t->dev || st.st_ino != t->ino ||
                    (st.st_mode & S_IFMT) != t->type)
                        return WALK;
        }
        return state;
}

/* Signs the dirty directories of every tree again. 0 when done (hex
 * updated), else a full walk is needed. */
static int update_dirty(fsx_watch *w)
{
        size_t idx[DIRTY_MAX];
        for (size_t i = 0; i < w->n; i++) {
                tree_root *t = &w->roots[i];
                if (!t->dirty)
                        continue;
                size_t n = 0;
                for (size_t k = 0; k < t->sig.n && n < DIRTY_MAX; k++)
                        if (t->dirty[k])
                                idx[n++] = k;
                free(t->dirty);
                t->dirty = NULL;
                char old_hex[DIRTY_MAX][33];
                for (size_t k = 0; k < n; k++)
                        memcpy(old_hex[k], t->sig.dirs[idx[k]].hex, 33);
                char hex[FSX_SIGNATURE_HEX];
                if (fsx_tree_signature_update(t->fd, &t->sig, idx, n, &w->lim, w->threshold, hex) !=
                    0)
                        return -1;
                history_add(w, w->hex[i], hex, NULL, idx, n, old_hex);
                memcpy(w->hex[i], hex, sizeof(hex));
        }
        return 0;
}

/* Marks the directories callers named (fsx_watch_changed_in) dirty in
 * tree 0: DIRS_CHANGED, or WALK when one is not a directory of its last
 * walk (made since, or a path the walk never listed) or too many are. */
static int mark_told(fsx_watch *w)
{
        tree_root *t = &w->roots[0];
        if (!w->n || !t->sig.is_dir || t->fd < 0)
                return WALK;
        if (!t->dirty && !(t->dirty = calloc(t->sig.n, sizeof(*t->dirty))))
                return WALK;
        size_t n_dirty = 0;
        for (size_t k = 0; k < t->sig.n; k++)
                n_dirty += t->dirty[k];
        for (size_t i = 0; i < w->n_told; i++) {
                size_t k = 0;
                while (k < t->sig.n &&
                       (!t->sig.dirs[k].rel || strcmp(t->sig.dirs[k].rel, w->told[i])))
                        k++;
                if (k == t->sig.n)
                        return WALK;
                if (!t->dirty[k]) {
                        t->dirty[k] = true;
                        if (++n_dirty > DIRTY_MAX)
                                return WALK;
                }
        }
        return DIRS_CHANGED;
}

/* ---- the shared walk ------------------------------------------------------ */

static uint64_t fnv_mix(uint64_t h, const void *p, size_t n)
{
        const unsigned char *c = p;
        for (size_t i = 0; i < n; i++)
                h = (h ^ c[i]) * 0x100000001b3ull;
        return h;
}

/* One entry's metadata: the folder it is in (by inode), its name, type,
 * mode, size, inode, and mtime and ctime to the nanosecond. */
static uint64_t entry_hash(ino_t parent, const char *name, const struct stat *st)
{
        uint64_t h = 0xcbf29ce484222325ull;
        h = fnv_mix(h, &parent, sizeof(parent));
        h = fnv_mix(h, name, strlen(name) + 1);
        h = fnv_mix(h, &st->st_mode, sizeof(st->st_mode));
        h = fnv_mix(h, &st->st_size, sizeof(st->st_size));
        h = fnv_mix(h, &st->st_ino, sizeof(st->st_ino));
        h = fnv_mix(h, &st->st_mtim, sizeof(st->st_mtim));
        return fnv_mix(h, &st->st_ctim, sizeof(st->st_ctim));
}

typedef struct meta_walk {
        dev_t dev;
        uint64_t sum, count, max;
        uint32_t max_depth;
        const atomic_bool *stop; /* set: give up (the owner is closing) */
} meta_walk;

/* Adds one entry name of the folder dfd (inode ino) to m, and what is
 * below it when it is a folder. */
static int meta_dir(meta_walk *m, int dfd, ino_t ino, uint32_t depth);
static int meta_entry(meta_walk *m, int dfd, ino_t ino, const char *name, uint32_t depth)
{
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return 0;
        struct stat st;
        if (++m->count > m->max || (m->stop && atomic_load(m->stop)) ||
            fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_dev != m->dev)
                return -1;
        m->sum += entry_hash(ino, name, &st);
        if (!S_ISDIR(st.st_mode))
                return 0;
        int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
                return -1;
        int r = meta_dir(m, sub, st.st_ino, depth + 1);
        close(sub);
        return r;
}

/* Adds every entry below the folder dfd (inode ino) to m, never following
 * a link and never leaving the root's device. 0, or -1 for anything else
 * (an entry gone meanwhile, a link where a folder was, past a cap): the
 * caller then walks in full, which gives the exact answer. dfd is the
 * caller's own, opened for this walk: it is listed with getdents64 itself,
 * not through a DIR (fdopendir's fstat would be one more round trip per
 * folder to a network file system's server, at every call). */
static int meta_dir(meta_walk *m, int dfd, ino_t ino, uint32_t depth)
{
        if (depth > m->max_depth)
                return -1;
        enum { BUF = 32768 };
        char *buf = malloc(BUF);
        if (!buf)
                return -1;
        int r = 0;
        ssize_t n = 0;
        while (r == 0 && (n = getdents64(dfd, buf, BUF)) > 0)
                for (ssize_t off = 0; r == 0 && off < n;) {
                        const struct dirent64 *de = (const void *)(buf + off);
                        off += de->d_reclen;
                        r = meta_entry(m, dfd, ino, de->d_name, depth);
                }
        if (r == 0 && n < 0)
                r = -1;
        free(buf);
        return r;
}

/* What a walk must find at a root: the identity the last walk recorded. */
typedef struct root_id {
        bool known;
        dev_t dev;
        ino_t ino;
        mode_t type;
} root_id;

/* A metadata digest (meta_digest_of): of every tree, and tree 0's sum of
 * one hash per entry with their count, from which the digest after a
 * change a caller named is reckoned (apply_told_files). */
typedef struct meta_dg {
        uint64_t h, sum0, count0;
} meta_dg;

/* A digest of the metadata of every entry of the n trees at paths (order-
 * free: a sum of one hash per entry, with their count), at most max
 * entries each, for the shared walk and the background walk. 0 with *ret,
 * or -1 when it cannot stand for the trees (see meta_dir, and a root that
 * is not the one ids names). Reads nothing of the watcher: the background
 * walk runs it without the watcher's lock. */
static int meta_digest_of(char *const *paths, const root_id *ids, size_t n, uint64_t max,
                          uint32_t max_depth, const atomic_bool *stop, meta_dg *ret)
{
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < n; i++) {
                const root_id *t = &ids[i];
                if (!t->known)
                        return -1;
                int fd = open(paths[i], O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
                                            (t->type == S_IFDIR ? O_DIRECTORY : O_PATH));
                if (fd < 0)
                        return -1;
                meta_walk m = {.dev = t->dev, .max = max, .max_depth = max_depth, .stop = stop};
                struct stat st;
                int r = fstat(fd, &st) < 0 || st.st_dev != t->dev || st.st_ino != t->ino ||
                                (st.st_mode & S_IFMT) != t->type
                            ? -1
                            : 0;
                if (r == 0) {
                        m.sum = entry_hash(0, "", &st);
                        if (S_ISDIR(st.st_mode))
                                r = meta_dir(&m, fd, st.st_ino, 0);
                }
                close(fd);
                if (r < 0)
                        return -1;
                h = fnv_mix(h, &m.sum, sizeof(m.sum));
                h = fnv_mix(h, &m.count, sizeof(m.count));
                if (i == 0) {
                        ret->sum0 = m.sum;
                        ret->count0 = m.count;
                }
        }
        ret->h = h;
        return 0;
}

/* The roots' identities the last walk recorded, into ids[0..n-1]. Under
 * the lock. */
static void root_ids(const fsx_watch *w, root_id *ids)
{
        for (size_t i = 0; i < w->n; i++)
                ids[i] = (root_id){.known = w->roots[i].known,
                                   .dev = w->roots[i].dev,
                                   .ino = w->roots[i].ino,
                                   .type = w->roots[i].type};
}

/* The shared walk at a call, under the lock: meta_digest_of the trees
 * within the shared walk cap. */
static int meta_digest(fsx_watch *w, meta_dg *ret)
{
        root_id *ids = calloc(w->n ? w->n : 1, sizeof(*ids));
        if (!ids)
                return -1;
        root_ids(w, ids);
        int r = meta_digest_of(w->paths, ids, w->n, w->shared_max, w->lim.max_depth, NULL, ret);
        free(ids);
        return r;
}

/* The metadata digest of a single tree whose entries' hashes sum to sum,
 * count of them (meta_digest's for w->n == 1). */
static uint64_t meta_of(uint64_t sum, uint64_t count)
{
        uint64_t h = fnv_mix(0xcbf29ce484222325ull, &sum, sizeof(sum));
        return fnv_mix(h, &count, sizeof(count));
}

/* Whether the folder prel (a walk's rel, "" for the root) holds the
 * folder rel itself. */
static bool holds_dir(const char *prel, const char *rel)
{
        size_t pl = strlen(prel);
        if (pl && (strncmp(rel, prel, pl) != 0 || rel[pl] != '/'))
                return false;
        return !strchr(rel + (pl ? pl + 1 : 0), '/');
}

/* The sum and count of meta_digest_of's entry hashes for the tree whose
 * walk left the state s, reckoned from its records (each folder's and
 * file's metadata as the walk read it): true when the state holds every
 * entry the walk listed (no FIFO, socket or mount point skipped, nothing
 * gone in between, the walk's order parents first, depth first). */
static bool tree_meta_from_state(const fsx_sig_state *s, uint64_t *ret_sum, uint64_t *ret_count)
{
        size_t *stack = calloc(s->n + 1, sizeof(*stack));
        uint64_t *subdirs = calloc(s->n + 1, sizeof(*subdirs));
        bool ok = stack && subdirs && s->is_dir && s->n && s->dirs[0].rel && !s->dirs[0].rel[0];
        size_t depth = 0;
        uint64_t sum = 0, count = 0;
        for (size_t k = 0; ok && k < s->n; k++) {
                const fsx_sig_dir *d = &s->dirs[k];
                struct stat st = {.st_mode = d->mode,
                                  .st_size = d->size,
                                  .st_ino = d->ino,
                                  .st_mtim = d->mtim,
                                  .st_ctim = d->ctim};
                if (k == 0) {
                        sum += entry_hash(0, "", &st);
                } else {
                        while (d->rel && depth && !holds_dir(s->dirs[stack[depth - 1]].rel, d->rel))
                                depth--;
                        ok = d->rel && depth;
                        if (!ok)
                                break;
                        const fsx_sig_dir *p = &s->dirs[stack[depth - 1]];
                        const char *name = d->rel + (p->rel[0] ? strlen(p->rel) + 1 : 0);
                        sum += entry_hash(p->ino, name, &st);
                        count++;
                        subdirs[stack[depth - 1]]++;
                }
                stack[depth++] = k;
                for (size_t f = 0; f < d->n_files; f++) {
                        const fsx_sig_file *r = &d->files[f];
                        struct stat fst = {.st_mode = r->mode,
                                           .st_size = r->size,
                                           .st_ino = r->ino,
                                           .st_mtim = r->mtim,
                                           .st_ctim = r->ctim};
                        sum += entry_hash(d->ino, r->name, &fst);
                        count++;
                }
        }
        for (size_t k = 0; ok && k < s->n; k++)
                ok = s->dirs[k].n_files + subdirs[k] == s->dirs[k].listed;
        free(stack);
        free(subdirs);
        *ret_sum = sum;
        *ret_count = count;
        return ok;
}

/* Contract: the metadata digest (meta_digest_of) of w's trees as its last
 * full walk recorded them, for a walk that took none before it (the first
 * call's: the trees were not yet known to be on shared storage), so that
 * the background walk compares its first metadata walk with it instead of
 * walking in full once more. Each entry's record was taken before its
 * content was read and before its folder was listed, so a change after
 * that moves the next metadata walk's digest away from this one, as a
 * change after the metadata walk that precedes a call's full walk does.
 * false (nothing set) when a state cannot stand for it (see
 * tree_meta_from_state; a file root). Under the lock. */
static bool meta_from_state(const fsx_watch *w, meta_dg *ret)
{
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < w->n; i++) {
                uint64_t sum, count;
                if (!w->roots[i].known || !tree_meta_from_state(&w->roots[i].sig, &sum, &count))
                        return false;
                h = fnv_mix(h, &sum, sizeof(sum));
                h = fnv_mix(h, &count, sizeof(count));
                if (i == 0) {
                        ret->sum0 = sum;
                        ret->count0 = count;
                }
        }
        ret->h = h;
        return true;
}

/* The folder of the state s that holds rel (its text up to the last '/'),
 * or s->n; *ret_name: rel's last part. */
static size_t parent_of(const fsx_sig_state *s, const char *rel, const char **ret_name)
{
        const char *slash = strrchr(rel, '/');
        size_t len = slash ? (size_t)(slash - rel) : 0;
        *ret_name = slash ? slash + 1 : rel;
        for (size_t k = 0; k < s->n; k++)
                if (s->dirs[k].rel && strlen(s->dirs[k].rel) == len &&
                    strncmp(s->dirs[k].rel, rel, len) == 0)
                        return k;
        return s->n;
}

/* What the shared walk's sum holds of the files v and of their folders,
 * as the state s recorded them: the sum of their entry hashes and their
 * count (a file without a record adds nothing). Each folder counts once. */
static void told_entries(const fsx_sig_state *s, const fsx_file_change *v, size_t n,
                         uint64_t *ret_sum, uint64_t *ret_count)
{
        uint64_t sum = 0, count = 0;
        for (size_t i = 0; i < n; i++) {
                const char *name;
                size_t k = parent_of(s, v[i].rel, &name);
                if (k == s->n)
                        continue;
                const fsx_sig_dir *d = &s->dirs[k];
                for (size_t f = 0; f < d->n_files; f++)
                        if (strcmp(d->files[f].name, name) == 0) {
                                const fsx_sig_file *r = &d->files[f];
                                struct stat st = {.st_mode = r->mode,
                                                  .st_size = r->size,
                                                  .st_ino = r->ino,
                                                  .st_mtim = r->mtim,
                                                  .st_ctim = r->ctim};
                                sum += entry_hash(d->ino, name, &st);
                                count++;
                        }
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++) {
                        const char *o;
                        seen = parent_of(s, v[j].rel, &o) == k;
                }
                if (seen)
                        continue;
                /* The folder's own entry, in its parent (the root's: 0, ""). */
                const char *dname = "";
                ino_t pino = 0;
                if (d->rel[0]) {
                        size_t p = parent_of(s, d->rel, &dname);
                        if (p == s->n)
                                continue;
                        pino = s->dirs[p].ino;
                }
                struct stat st = {.st_mode = d->mode,
                                  .st_size = d->size,
                                  .st_ino = d->ino,
                                  .st_mtim = d->mtim,
                                  .st_ctim = d->ctim};
                sum += entry_hash(pino, dname, &st);
                count++;
        }
        *ret_sum = sum;
        *ret_count = count;
}

/* Applies the files a caller named (fsx_watch_files_changed) to tree 0's
 * signature, reading them alone: the state the call goes on with, or WALK.
 * With meta (the shared walk's digest of now, taken within the safety
 * period of a valid last one), the change must explain it: the last
 * digest, less what it held of the named files and their folders, plus
 * what they are now, must be meta; else something else changed too (behind
 * the writer's back), and the tree is walked in full. Without the shared
 * walk, the events decide as for any other change; on shared storage the
 * background walk then checks the tree against the digest reckoned here.
 * A background walk running meanwhile read the tree before, or while, it
 * took this change: its result is dropped (bg_lost). */
static int apply_told_files(fsx_watch *w, int state, const meta_dg *meta)
{
        tree_root *t = &w->roots[0];
        if (w->n != 1 || !t->sig.is_dir || t->fd < 0)
                return WALK;
        const fsx_file_change *v = w->told_files;
        size_t n = w->n_told_files;
        uint64_t s0, c0, s1, c1;
        told_entries(&t->sig, v, n, &s0, &c0);
        char hex[FSX_SIGNATURE_HEX];
        fsx_hashes kept = {0};
        if (fsx_tree_signature_files(t->fd, &t->sig, v, n, &w->lim, w->threshold, hex, &kept) != 0)
                return WALK;
        told_entries(&t->sig, v, n, &s1, &c1);
        uint64_t sum = w->meta_sum - s0 + s1, count = w->meta_count - c0 + c1;
        if (meta && meta_of(sum, count) != meta->h) {
                /* The state is the told one now, not the tree's: no history
                 * can be drawn from it, and the full walk starts afresh. */
                fsx_sig_state_free(&t->sig);
                history_clear(w);
                fsx_hashes_free(&kept);
                return WALK;
        }
        history_add_files(w, w->hex[0], hex, v, n);
        memcpy(w->hex[0], hex, sizeof(hex));
        fsx_hashes_free(&w->kept);
        w->kept = kept;
        memcpy(w->kept_to, hex, sizeof(hex));
        if (meta || w->meta_valid) {
                w->meta = meta_of(sum, count);
                w->meta_sum = sum;
                w->meta_count = count;
        }
        if (w->bg_running)
                w->bg_lost = true;
        return state == WALK ? UNCHANGED : state;
}

/* The state after the files a caller named, if any (apply_told_files):
 * tried when the events say no walk, or when the shared walk's digest of
 * now (meta) may be checked against a recent valid one; they are told
 * once. */
static int told_files(fsx_watch *w, int state, bool recent, const meta_dg *meta)
{
        if (!w->n_told_files)
                return state;
        if (state != WALK || (recent && meta))
                state = apply_told_files(w, state, meta);
        told_files_clear(w);
        return state;
}

/* Whether the last walk's trees are walked at every call: some are on
 * shared storage, and they are small enough. */
static bool shared_walk(const fsx_watch *w)
{
        return w->shared && w->entries <= w->shared_max;
}

/* The safety walk's period: on shared storage at least ten times the last
 * full walk, so that the walk takes at most a tenth of the time of the calls
 * that pay for it (a 10,000-file tree over FUSE takes 30 to 90 s, and with
 * the plain period every call 10 s after the last walk would pay all of it).
 * What airlock's own tools change does not wait for it: fsx_watch_changed_in
 * and fsx_watch_invalidate act at the next call. Local trees keep the plain
 * period: their walks are fast, and inotify sees almost everything there. */
static uint64_t safety_period(const fsx_watch *w)
{
        if (!w->shared)
                return w->period_ns;
        uint64_t ten = w->walk_ns > UINT64_MAX / 10 ? UINT64_MAX : w->walk_ns * 10;
        return ten > w->period_ns ? ten : w->period_ns;
}

/* The background walk's period (fsx_watch_background): for a tree set
 * within the shared walk cap, FSX_BG_PERIOD_NS or ten times its last
 * metadata walk, whichever is longer; above it, the safety period. */
static uint64_t bg_period(const fsx_watch *w)
{
        if (!shared_walk(w))
                return safety_period(w);
        uint64_t ten = w->meta_ns > UINT64_MAX / 10 ? UINT64_MAX : w->meta_ns * 10;
        return ten > FSX_BG_PERIOD_NS ? ten : FSX_BG_PERIOD_NS;
}

/* Whether a call may answer from the state as it is, with no walk of a
 * tree on shared storage: a walker serves the watcher, its state is a
 * complete walk with every watch set, and a background walk is running
 * or the walk whose result the state is began at most one period plus
 * two walks (and a second) ago. Else the background walker is behind
 * (the tree set was not used for a while, or more sets are used than it
 * walks), and the call walks as it did without it, so that the contract
 * (design.md, "Shared storage") holds whatever the walker does. */
static bool bg_fresh(const fsx_watch *w, uint64_t now)
{
        if (!w->bg || !w->shared || !w->valid || w->ifd < 0 || !w->verified_ns)
                return false;
        if (w->bg_running)
                return true;
        uint64_t walk = w->walk_ns > w->meta_ns ? w->walk_ns : w->meta_ns;
        uint64_t limit = bg_period(w) + 2 * walk + FSX_BG_SLACK_NS;
        return now - w->verified_ns <= limit;
}

/* What a call must do (UNCHANGED, DIRS_CHANGED or WALK) before the
 * directories callers named: from the events, or on shared storage from
 * the background walk's state or the shared walk (*meta, *have_meta: the
 * metadata digest it took, for the full walk to keep). Under the lock. */
static int call_state(fsx_watch *w, uint64_t now, meta_dg *meta, bool *have_meta)
{
        /* On shared storage with a background walker that keeps up: this
         * host's events alone, with no lookup on the file system (the
         * walker checks the roots and what other machines changed). */
        bool bg = bg_fresh(w, now);
        int state =
            bg ? check_events(w, false)
            : w->valid && w->ifd >= 0 && now - w->last_walk_ns < safety_period(w) && !shared_walk(w)
                ? check_events(w, true)
                : WALK;
        /* On shared storage: the metadata of every entry against what it
         * was just before the last signature walk began. */
        *meta = (meta_dg){0};
        *have_meta = !bg && shared_walk(w) && meta_digest(w, meta) == 0;
        if (*have_meta && w->meta_valid && meta->h == w->meta &&
            now - w->last_walk_ns < safety_period(w)) {
                state = UNCHANGED;
                w->verified_ns = now;
                w->checked_ns = al_now_ns();
                w->meta_ns = w->checked_ns - now;
        }
        return state;
}

/* After a full walk that ended with r: what it found of the trees (their
 * entries, whether one is on shared storage) and, on shared storage, when
 * no metadata walk preceded it (the first), the digest the background
 * walk compares with, from its state (meta_from_state). A background
 * walk's own watcher leaves that to its owner. Under the lock. */
static void walk_noted(fsx_watch *w, int r)
{
        w->shared = false;
        w->entries = 0;
        for (size_t i = 0; r >= 0 && i < w->n; i++) {
                w->entries += w->roots[i].sig.listed + 1;
                if (w->roots[i].shared && !w->shared) {
                        w->shared = true;
                        w->fs = w->roots[i].fs;
                }
        }
        meta_dg meta = {0};
        if (r >= 0 && w->shared && !w->meta_valid && !w->walk_stop && meta_from_state(w, &meta)) {
                w->meta = meta.h;
                w->meta_sum = meta.sum0;
                w->meta_count = meta.count0;
                w->meta_valid = true;
        }
}

int fsx_watch_signatures(fsx_watch *w, char (*ret_hex)[FSX_SIGNATURE_HEX], bool *ret_walked,
                         airlock_error *err)
{
        pthread_mutex_lock(&w->lock);
        uint64_t now = al_now_ns();
        meta_dg meta = {0};
        bool have_meta = false;
        int state = call_state(w, now, &meta, &have_meta);
        bool recent = have_meta && w->meta_valid && now - w->last_walk_ns < safety_period(w);
        /* Files a caller named (another machine's change): read alone,
         * checked against the shared walk's digest when one was taken. */
        state = told_files(w, state, recent, have_meta ? &meta : NULL);
        /* Directories a caller named (another machine's change): signed
         * again as if events had named them. */
        if (w->n_told) {
                if (state == UNCHANGED || state == DIRS_CHANGED)
                        state = mark_told(w);
                told_clear(w);
        }
        /* Events that name only files of known directories: those
         * directories alone are signed again, their watches kept. */
        bool partial = state == DIRS_CHANGED && update_dirty(w) == 0;
        if (state == UNCHANGED || partial) {
                memcpy(ret_hex, w->hex, w->n * sizeof(*w->hex));
                if (partial)
                        w->partial++;
                else
                        w->checks++;
                pthread_mutex_unlock(&w->lock);
                /* A partial walk read the tree again, as a walk does. */
                if (ret_walked)
                        *ret_walked = partial;
                return 0;
        }

        /* A full walk, from a new inotify instance. After a failure to
         * watch everything, watches are tried again once per period only:
         * setting thousands of watches only to drop them would double the
         * cost of every call. */
        /* The directories of the last signature, to tell which changed. */
        fsx_sig_state old = {0};
        char old_hex[FSX_SIGNATURE_HEX] = "";
        if (w->n == 1 && w->roots[0].sig.n && w->roots[0].known) {
                old = w->roots[0].sig;
                w->roots[0].sig = (fsx_sig_state){0};
                memcpy(old_hex, w->hex[0], sizeof(old_hex));
        }
        drop_watches(w);
        bool try_watch = !w->failed || now - w->last_try_ns >= w->period_ns;
        w->walk_failed = false;
        if (try_watch) {
                w->last_try_ns = now;
                w->failed = false;
                w->reason[0] = '\0';
                w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
                if (w->ifd < 0)
                        watch_failed(w,
                                     "cannot watch the workspace (inotify_init1: %s%s): every "
                                     "call walks the trees",
                                     strerror(errno),
                                     errno == EMFILE ? ", the per-user inotify instance limit "
                                                       "fs.inotify.max_user_instances"
                                                     : "");
        }
        w->walks++;
        uint64_t walk_start = al_now_ns();
        fsx_sig_hook hook = {.entered = on_entered, .ctx = w, .stop = w->walk_stop};
        int r = 0;
        for (size_t i = 0; i < w->n && r >= 0; i++) {
                w->cur = i;
                w->roots[i].known = false;
                r = fsx_tree_signature_hooked(w->paths[i], &w->lim, w->threshold, &hook,
                                              &w->roots[i].sig, w->hex[i], err);
        }
        /* The safety period counts from the walk's end: a walk that takes
         * longer than the period (10,000 files over a network file system
         * under load) would otherwise make every call walk again. */
        w->last_walk_ns = al_now_ns();
        w->walk_ns = w->last_walk_ns - walk_start;
        if (w->walk_failed)
                w->failed = true;
        if (r < 0 || w->walk_failed) {
                /* No watch is kept that does not cover a whole, signed set
                 * of trees: the next call walks again. */
                drop_watches(w);
        } else if (w->ifd >= 0) {
                w->valid = true;
        }
        w->meta = meta.h;
        w->meta_sum = meta.sum0;
        w->meta_count = meta.count0;
        w->meta_valid = have_meta && r >= 0;
        w->verified_ns = now;
        w->checked_ns = w->last_walk_ns;
        /* A background walk that began before this one is older. */
        if (w->bg_running)
                w->bg_lost = true;
        walk_noted(w, r);
        if (r >= 0 && old.n)
                history_add(w, old_hex, w->hex[0], &old, NULL, 0, NULL);
        else if (r < 0)
                history_clear(w);
        fsx_sig_state_free(&old);
        if (r >= 0)
                memcpy(ret_hex, w->hex, w->n * sizeof(*w->hex));
        pthread_mutex_unlock(&w->lock);
        if (ret_walked)
                *ret_walked = true;
        return r;
}

int fsx_watch_hashes(fsx_watch *w, const char *to, const char *const *dirs, size_t n,
                     fsx_hashes *ret)
{
        *ret = (fsx_hashes){0};
        pthread_mutex_lock(&w->lock);
        const fsx_sig_state *sig = w->n == 1 ? &w->roots[0].sig : NULL;
        int r = sig && sig->is_dir && strcmp(w->hex[0], to) == 0 ? 0 : -1;
        for (size_t i = 0; r == 0 && i < n; i++) {
                size_t k = 0;
                while (k < sig->n && (!sig->dirs[k].rel || strcmp(sig->dirs[k].rel, dirs[i])))
                        k++;
                r = k < sig->n && fsx_hashes_add_dir(ret, sig, k) == 0 ? 0 : -1;
        }
        /* The told files the signature `to` read whole: staged from their
         * bytes, not read a second time from the file system. */
        for (size_t i = 0; r == 0 && strcmp(w->kept_to, to) == 0 && i < w->kept.n_kept; i++) {
                const fsx_kept_file *k = &w->kept.kept[i];
                (void)fsx_hashes_keep(ret, &k->rec, k->rec.name, k->data);
        }
        pthread_mutex_unlock(&w->lock);
        if (r < 0)
                fsx_hashes_free(ret);
        else
                fsx_hashes_sort(ret);
        return r;
}

/* ---- the background walk ------------------------------------------------ */

/* Takes the shadow's full walk (sh, begun at start after the metadata
 * digest meta) as w's state; the old state goes to sh, which the caller
 * frees. Under w's lock, with no call's walk since start (bg_lost). */
static void bg_install(fsx_watch *w, fsx_watch *sh, const meta_dg *meta, bool meta_ok,
                       uint64_t start)
{
        int ifd = w->ifd;
        w->ifd = sh->ifd;
        sh->ifd = ifd;
        tree_root *roots = w->roots;
        w->roots = sh->roots;
        sh->roots = roots;
        char(*hex)[FSX_SIGNATURE_HEX] = w->hex;
        w->hex = sh->hex;
        sh->hex = hex;
        w->valid = sh->valid;
        w->watches = sh->watches;
        w->failed = sh->failed;
        memcpy(w->reason, sh->reason, sizeof(w->reason));
        w->last_walk_ns = sh->last_walk_ns;
        w->walk_ns = sh->walk_ns;
        w->last_try_ns = sh->last_try_ns;
        w->entries = sh->entries;
        w->shared = sh->shared;
        w->fs = sh->fs;
        w->meta = meta->h;
        w->meta_sum = meta->sum0;
        w->meta_count = meta->count0;
        w->meta_valid = meta_ok;
        w->walks++;
        w->verified_ns = start;
        w->checked_ns = w->last_walk_ns;
        if (w->n == 1 && sh->roots[0].sig.n && sh->roots[0].known)
                history_add(w, sh->hex[0], w->hex[0], &sh->roots[0].sig, NULL, 0, NULL);
        /* What callers named while the walk ran may have changed after
         * the walk read it: signed again at the next call. */
        for (size_t i = 0; i < w->n_bg_told && w->valid; i++)
                if (strv_add(&w->told, &w->n_told, w->bg_told[i]) < 0) {
                        told_clear(w);
                        w->valid = false;
                }
}

/* A full walk of w's trees into a watcher of their own, taken as w's
 * state unless a call walked or was told to meanwhile. Without w's lock
 * through the walk. */
static void bg_full_walk(fsx_watch *w, const meta_dg *meta, bool meta_ok, uint64_t start)
{
        pthread_mutex_lock(&w->lock);
        unsigned max_watches = w->max_watches;
        uint64_t period = w->period_ns, shared_max = w->shared_max;
        pthread_mutex_unlock(&w->lock);
        fsx_watch *sh = NULL;
        char(*hex)[FSX_SIGNATURE_HEX] = calloc(w->n ? w->n : 1, sizeof(*hex));
        int r = hex ? fsx_watch_new((const char *const *)w->paths, w->n, &w->lim, w->threshold, &sh,
                                    NULL)
                    : -ENOMEM;
        if (r >= 0) {
                fsx_watch_set_knobs(sh, max_watches, period);
                fsx_watch_set_shared_max(sh, shared_max);
                /* Closing the owner stops the walk at its next entry: a
                 * full walk of 10,000 files over a network file system
                 * takes seconds to minutes. */
                sh->walk_stop = &w->bg_stop;
                r = fsx_watch_signatures(sh, hex, NULL, NULL);
        }
        free(hex);
        pthread_mutex_lock(&w->lock);
        if (!w->bg_lost && !atomic_load(&w->bg_stop)) {
                if (r >= 0)
                        bg_install(w, sh, meta, meta_ok, start);
                else
                        /* The trees cannot be signed (a root gone, a
                         * link, past a cap): the next call walks, and
                         * reports it. */
                        w->valid = false;
        }
        pthread_mutex_unlock(&w->lock);
        fsx_watch_free(sh);
}

uint64_t fsx_watch_background(fsx_watch *w)
{
        uint64_t now = al_now_ns();
        pthread_mutex_lock(&w->lock);
        if (!w->bg || !w->shared || atomic_load(&w->bg_stop)) {
                pthread_mutex_unlock(&w->lock);
                return UINT64_MAX;
        }
        uint64_t due = w->checked_ns + bg_period(w);
        root_id *ids = NULL;
        if (!w->valid || w->bg_running || !w->verified_ns || now < due ||
            !(ids = calloc(w->n ? w->n : 1, sizeof(*ids)))) {
                /* Not walked yet, invalidated (the next call walks), or
                 * not due: asked again later. */
                pthread_mutex_unlock(&w->lock);
                return now < due ? due : now + FSX_BG_PERIOD_NS;
        }
        root_ids(w, ids);
        bool had = w->meta_valid;
        uint64_t old = w->meta, max = w->shared_max;
        /* Past the shared walk cap, the metadata walk still costs a lookup
         * per entry, against a full walk's open and read of every file. */
        if (max < 2 * w->entries + 1024)
                max = 2 * w->entries + 1024;
        w->bg_running = true;
        w->bg_start_ns = now;
        w->bg_lost = false;
        strv_clear(&w->bg_told, &w->n_bg_told);
        w->bg_walks++;
        pthread_mutex_unlock(&w->lock);

        meta_dg meta = {0};
        bool ok =
            meta_digest_of(w->paths, ids, w->n, max, w->lim.max_depth, &w->bg_stop, &meta) == 0;
        free(ids);
        uint64_t end = al_now_ns();
        if ((!ok || !had || meta.h != old) && !atomic_load(&w->bg_stop))
                bg_full_walk(w, &meta, ok, now);

        pthread_mutex_lock(&w->lock);
        if (ok)
                w->meta_ns = end - now;
        if (!w->bg_lost && ok && had && meta.h == old) {
                w->verified_ns = now;
                w->checked_ns = end;
        }
        w->bg_running = false;
        strv_clear(&w->bg_told, &w->n_bg_told);
        /* After a walk a call made meanwhile, counted from that walk. */
        uint64_t next = (w->checked_ns > end ? w->checked_ns : end) + bg_period(w);
        pthread_mutex_unlock(&w->lock);
        return next;
}

void fsx_watch_stop_background(fsx_watch *w)
{
        atomic_store(&w->bg_stop, true);
}

void fsx_watch_set_background(fsx_watch *w, bool on)
{
        pthread_mutex_lock(&w->lock);
        w->bg = on;
        pthread_mutex_unlock(&w->lock);
}

bool fsx_watch_shared(fsx_watch *w)
{
        pthread_mutex_lock(&w->lock);
        bool shared = w->shared;
        pthread_mutex_unlock(&w->lock);
        return shared;
}

void fsx_watch_get_info(fsx_watch *w, fsx_watch_info *ret)
{
        pthread_mutex_lock(&w->lock);
        *ret = (fsx_watch_info){
            .active = w->valid,
            .watches = w->watches,
            .max_watches = w->max_watches,
            .period_ns = w->period_ns,
            .walks = w->walks,
            .partial = w->partial,
            .checks = w->checks,
            .shared = w->shared,
            .shared_walk = shared_walk(w),
            .shared_max = w->shared_max,
            .entries = w->entries,
            .background = w->bg && w->shared,
            .bg_walks = w->bg_walks,
        };
        if (w->failed)
                snprintf(ret->reason, sizeof(ret->reason), "%s", w->reason);
        else if (w->shared && w->bg)
                snprintf(ret->reason, sizeof(ret->reason),
                         "the workspace is on shared storage (%s): a change made there by "
                         "another machine is seen at the next call when its writer tells "
                         "(airlock's workspace tools move the tenant's generation), else once "
                         "the background walk finds it (every %llu s for up to %llu entries, "
                         "else every %llu s or ten times the last full walk, whichever is "
                         "longer)",
                         w->fs, (unsigned long long)(FSX_BG_PERIOD_NS / 1000000000ull),
                         (unsigned long long)w->shared_max,
                         (unsigned long long)(w->period_ns / 1000000000ull));
        else if (w->shared && !ret->shared_walk)
                snprintf(ret->reason, sizeof(ret->reason),
                         "the workspace is on shared storage (%s) and holds more than %llu "
                         "entries (the shared walk cap): a change made there by another machine "
                         "is seen at the next call only when its writer tells (airlock's "
                         "workspace tools move the tenant's generation), else at the safety "
                         "walk (the first call %llu s or ten times the last full walk's "
                         "duration, whichever is longer, after that walk)",
                         w->fs, (unsigned long long)w->shared_max,
                         (unsigned long long)(w->period_ns / 1000000000ull));
        pthread_mutex_unlock(&w->lock);
}

void fsx_watch_invalidate(fsx_watch *w)
{
        pthread_mutex_lock(&w->lock);
        told_clear(w);
        told_files_clear(w);
        w->valid = false;
        w->meta_valid = false;
        w->bg_lost = true;
        pthread_mutex_unlock(&w->lock);
}

void fsx_watch_changed_in(fsx_watch *w, const char *const *dirs, size_t n)
{
        pthread_mutex_lock(&w->lock);
        /* A watcher that walks in full at its next call anyway needs no
         * list. */
        bool full = !w->valid;
        for (size_t i = 0; i < n && !full; i++)
                full = strv_add(&w->told, &w->n_told, dirs[i]) < 0;
        /* A background walk running may have read these folders before
         * the change: they are told again when its result is taken. */
        for (size_t i = 0; i < n && w->bg_running && !w->bg_lost; i++)
                w->bg_lost = strv_add(&w->bg_told, &w->n_bg_told, dirs[i]) < 0;
        if (full) {
                told_clear(w);
                w->valid = false;
                w->meta_valid = false;
                w->bg_lost = true;
        }
        pthread_mutex_unlock(&w->lock);
}

void fsx_watch_files_changed(fsx_watch *w, const fsx_file_change *v, size_t n)
{
        pthread_mutex_lock(&w->lock);
        /* As for folders: a watcher that walks in full anyway needs none. */
        bool full = !w->valid || w->n_told_files + n > DIRTY_MAX;
        if (!full) {
                fsx_file_change *nv =
                    realloc(w->told_files, (w->n_told_files + n + 1) * sizeof(*nv));
                if (nv)
                        w->told_files = nv;
                full = !nv;
        }
        for (size_t i = 0; i < n && !full; i++) {
                /* A file told again: its latest word replaces the first. */
                size_t k = 0;
                while (k < w->n_told_files && strcmp(w->told_files[k].rel, v[i].rel) != 0)
                        k++;
                char *rel = strdup(v[i].rel);
                if (!rel) {
                        full = true;
                        break;
                }
                if (k < w->n_told_files)
                        free((char *)w->told_files[k].rel);
                else
                        w->n_told_files++;
                w->told_files[k] = v[i];
                w->told_files[k].rel = rel;
        }
        if (full) {
                told_clear(w);
                told_files_clear(w);
                w->valid = false;
                w->meta_valid = false;
        }
        pthread_mutex_unlock(&w->lock);
}

void fsx_watch_set_shared_max(fsx_watch *w, uint64_t max_entries)
{
        pthread_mutex_lock(&w->lock);
        w->shared_max = max_entries;
        pthread_mutex_unlock(&w->lock);
}

void fsx_watch_free(fsx_watch *w)
{
        if (!w)
                return;
        drop_watches(w);
        history_clear(w);
        told_clear(w);
        strv_clear(&w->bg_told, &w->n_bg_told);
        told_files_clear(w);
        fsx_hashes_free(&w->kept);
        for (size_t i = 0; w->paths && i < w->n; i++)
                free(w->paths[i]);
        free(w->paths);
        free(w->hex);
        free(w->roots);
        pthread_mutex_destroy(&w->lock);
        free(w);
}
