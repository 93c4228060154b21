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
 * go to the watches of the directory the writer named). */
#include "fsx/fsx_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
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
} tree_root;

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
        uint64_t last_walk_ns; /* when the last full walk began */
        uint64_t last_try_ns;  /* when watches were last attempted */
        bool failed;           /* the last attempt could not watch everything */
        char reason[256];
        uint64_t walks, checks;

        /* During a walk: the tree being walked, and whether a watch failed. */
        size_t cur;
        bool walk_failed;
};

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
        pthread_mutex_init(&w->lock, NULL);
        w->paths = calloc(n ? n : 1, sizeof(*w->paths));
        w->hex = calloc(n ? n : 1, sizeof(*w->hex));
        w->roots = calloc(n ? n : 1, sizeof(*w->roots));
        bool ok = w->paths && w->hex && w->roots;
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
        w->failed = false;
        pthread_mutex_unlock(&w->lock);
}

static void drop_watches(fsx_watch *w)
{
        if (w->ifd >= 0)
                close(w->ifd);
        w->ifd = -1;
        w->watches = 0;
        w->valid = false;
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
static void on_entered(void *ctx, int fd, const struct stat *st, bool is_root)
{
        fsx_watch *w = ctx;
        if (is_root)
                w->roots[w->cur] = (tree_root){st->st_dev, st->st_ino, st->st_mode & S_IFMT, true};
        if (w->walk_failed || w->ifd < 0)
                return;
        if (w->watches >= w->max_watches) {
                watch_failed(w,
                             "the workspace and mounts hold more than %u directories to watch "
                             "(the watch cap): every call walks the trees",
                             w->max_watches);
                return;
        }
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        uint32_t mask = WATCH_EVENTS | (S_ISDIR(st->st_mode) ? IN_ONLYDIR : 0);
        if (inotify_add_watch(w->ifd, proc, mask) >= 0) {
                w->watches++;
                return;
        }
        if (errno == ENOSPC)
                watch_failed(w, "the per-user inotify watch limit (fs.inotify.max_user_watches) is "
                                "reached: every call walks the trees");
        else
                watch_failed(w,
                             "cannot watch the workspace (inotify_add_watch: %s): every call "
                             "walks the trees",
                             strerror(errno));
}

/* True when anything may have changed since the last walk: events queued
 * (IN_Q_OVERFLOW included), a read error, or a root path that no longer
 * names the inode the walk started from (an ancestor renamed, the root
 * replaced by a link). */
static bool changed_since_walk(fsx_watch *w)
{
        /* inotify events are at least 16 bytes and a read returns whole
         * events; one byte more than an event's name can hold is not
         * needed: any event at all means "walk again". */
        char buf[sizeof(struct inotify_event) + NAME_MAX + 1]
            __attribute__((aligned(__alignof__(struct inotify_event))));
        ssize_t r = read(w->ifd, buf, sizeof(buf));
        if (r > 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
                return true;
        if (r == 0)
                return true;
        for (size_t i = 0; i < w->n; i++) {
                struct stat st;
                if (fstatat(AT_FDCWD, w->paths[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
                        return true;
                const tree_root *t = &w->roots[i];
                if (!t->known || st.st_dev != t->dev || st.st_ino != t->ino ||
                    (st.st_mode & S_IFMT) != t->type)
                        return true;
        }
        return false;
}

int fsx_watch_signatures(fsx_watch *w, char (*ret_hex)[FSX_SIGNATURE_HEX], bool *ret_walked,
                         airlock_error *err)
{
        pthread_mutex_lock(&w->lock);
        uint64_t now = al_now_ns();
        if (w->valid && w->ifd >= 0 && now - w->last_walk_ns < w->period_ns &&
            !changed_since_walk(w)) {
                memcpy(ret_hex, w->hex, w->n * sizeof(*w->hex));
                w->checks++;
                pthread_mutex_unlock(&w->lock);
                if (ret_walked)
                        *ret_walked = false;
                return 0;
        }

        /* A full walk, from a new inotify instance. After a failure to
         * watch everything, watches are tried again once per period only:
         * setting thousands of watches only to drop them would double the
         * cost of every call. */
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
        w->last_walk_ns = now;
        w->walks++;
        fsx_sig_hook hook = {.entered = on_entered, .ctx = w};
        int r = 0;
        for (size_t i = 0; i < w->n && r >= 0; i++) {
                w->cur = i;
                w->roots[i].known = false;
                r = fsx_tree_signature_hooked(w->paths[i], &w->lim, w->threshold, &hook, w->hex[i],
                                              err);
        }
        if (w->walk_failed)
                w->failed = true;
        if (r < 0 || w->walk_failed) {
                /* No watch is kept that does not cover a whole, signed set
                 * of trees: the next call walks again. */
                drop_watches(w);
        } else if (w->ifd >= 0) {
                w->valid = true;
        }
        if (r >= 0)
                memcpy(ret_hex, w->hex, w->n * sizeof(*w->hex));
        pthread_mutex_unlock(&w->lock);
        if (ret_walked)
                *ret_walked = true;
        return r;
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
            .checks = w->checks,
        };
        if (w->failed)
                snprintf(ret->reason, sizeof(ret->reason), "%s", w->reason);
        pthread_mutex_unlock(&w->lock);
}

void fsx_watch_free(fsx_watch *w)
{
        if (!w)
                return;
        drop_watches(w);
        for (size_t i = 0; w->paths && i < w->n; i++)
                free(w->paths[i]);
        free(w->paths);
        free(w->hex);
        free(w->roots);
        pthread_mutex_destroy(&w->lock);
        free(w);
}
