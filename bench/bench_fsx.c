/* bench_fsx: measures the file transfer core against `cp -a` of the same
 * trees, side by side in one run, and prints a Markdown table.
 *
 *   bench_fsx [--quick] [--dir DIR]
 *
 * Cases: staging 10,000 files of 4 KiB; staging one 1 GiB file; capturing
 * 10,000 files of 1 KiB (with the peak RSS of a process doing only that).
 * Each figure is the median of a few repetitions, each copy timed from a
 * synced page cache, the order alternating; the ratio is airlock's
 * time over cp's (below 1: airlock is faster). cp is timed from fork to
 * exit, so it carries one exec (about a millisecond) that airlock does not.
 * Data lives under DIR (default /tmp) and is removed at the end. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fsx/fsx.h"
#include "fsx/fsx_watch.h"
#include "core/util.h"

extern char **environ;

static double now_ms(void)
{
        return (double)al_now_ns() / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
        qsort(v, (size_t)n, sizeof(*v), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what)
{
        fprintf(stderr, "bench_fsx: %s: %s\n", what, strerror(errno));
        exit(1);
}

static int run(char *const argv[])
{
        pid_t pid;
        if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ) != 0)
                die(argv[0]);
        int status;
        if (waitpid(pid, &status, 0) < 0)
                die("waitpid");
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void rm_rf(const char *path)
{
        char *argv[] = {"rm", "-rf", (char *)path, NULL};
        run(argv);
}

/* The page-cache state of a regular file source before a timed copy, made
 * the same for both copiers: CACHE_ANY leaves it as it is (directories),
 * CACHE_WARM reads it whole first, CACHE_COLD writes it back and drops its
 * pages (posix_fadvise DONTNEED, this file only), so the copy reads the
 * disk. Without this the 1 GiB figure depended on who went first after the
 * kernel had evicted the source: that one read the disk (about 1 s here),
 * the other found the pages it left (0.2 s), the "anomaly that comes and
 * goes". */
enum { CACHE_ANY, CACHE_WARM, CACHE_COLD };
static int cache_state = CACHE_ANY;

static void set_cache(const char *src)
{
        if (cache_state == CACHE_ANY)
                return;
        int fd = open(src, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                die(src);
        if (cache_state == CACHE_COLD) {
                if (fdatasync(fd) < 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0)
                        die("posix_fadvise");
        } else {
                static char buf[1 << 20];
                while (read(fd, buf, sizeof(buf)) > 0)
                        ;
        }
        close(fd);
}

static double time_cp(const char *src, const char *dst)
{
        rm_rf(dst);
        char *argv[] = {"cp", "-a", (char *)src, (char *)dst, NULL};
        sync();
        set_cache(src);
        double t = now_ms();
        if (run(argv) != 0) {
                fprintf(stderr, "bench_fsx: cp -a %s %s failed\n", src, dst);
                exit(1);
        }
        return now_ms() - t;
}

static double time_stage(const char *src, bool is_dir, const char *dst)
{
        rm_rf(dst);
        if (mkdir(dst, 0755) < 0)
                die(dst);
        int fd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                die(dst);
        fsx_source s = {.host_path = src, .dest = is_dir ? NULL : "file"};
        fsx_limits lim = {.max_bytes = 4ull << 30, .max_files = 1000000, .max_depth = 256};
        airlock_error err = {0};
        sync();
        set_cache(src);
        double t = now_ms();
        int r = fsx_stage(fd, &s, 1, &lim, (uid_t)-1, (gid_t)-1, NULL, &err);
        double dt = now_ms() - t;
        close(fd);
        if (r < 0) {
                fprintf(stderr, "bench_fsx: staging %s: %s\n", src, err.message);
                exit(1);
        }
        return dt;
}

/* Captures dir in a child process so that its peak RSS is the capture's
 * (plus the process's own couple of MiB). */
static double time_capture(const char *dir, long *ret_rss_kib)
{
        int pfd[2];
        if (pipe(pfd) < 0)
                die("pipe");
        /* As for the copies: no one else's write-back runs during it. */
        sync();
        pid_t pid = fork();
        if (pid < 0)
                die("fork");
        if (pid == 0) {
                close(pfd[0]);
                int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                fsx_limits lim = {.max_bytes = 64 << 20,
                                  .max_files = 100000,
                                  .max_depth = 64,
                                  .max_file = 16 << 20};
                airlock_file *f = NULL;
                airlock_refusal *rf = NULL;
                size_t nf = 0, nr = 0;
                airlock_error err = {0};
                /* One capture first, as in a library that has served runs
                 * before (media table loaded, allocator warm); the second
                 * is timed. Both hold the same data, so the peak RSS is
                 * still that of one capture. */
                if (fsx_capture(fd, &lim, &f, &nf, &rf, &nr, &err) == 0) {
                        fsx_files_free(f, nf);
                        fsx_refused_free(rf, nr);
                }
                double t = now_ms();
                int r = fsx_capture(fd, &lim, &f, &nf, &rf, &nr, &err);
                double dt = now_ms() - t;
                if (r < 0 || nr != 0) {
                        fprintf(stderr, "bench_fsx: capture: %s (%zu refused)\n", err.message, nr);
                        _exit(1);
                }
                fsx_files_free(f, nf);
                fsx_refused_free(rf, nr);
                if (write(pfd[1], &dt, sizeof(dt)) != sizeof(dt))
                        _exit(1);
                _exit(0);
        }
        close(pfd[1]);
        double dt = -1;
        if (read(pfd[0], &dt, sizeof(dt)) != sizeof(dt))
                dt = -1;
        close(pfd[0]);
        int status;
        struct rusage ru;
        if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
            dt < 0) {
                fprintf(stderr, "bench_fsx: capture child failed\n");
                exit(1);
        }
        *ret_rss_kib = ru.ru_maxrss;
        return dt;
}

static void make_tree(const char *root, int files, size_t size)
{
        if (mkdir(root, 0755) < 0)
                die(root);
        char *buf = malloc(size);
        for (size_t i = 0; i < size; i++)
                buf[i] = (char)('a' + i % 26);
        char path[4096];
        int per_dir = 100;
        for (int i = 0; i < files; i++) {
                if (i % per_dir == 0) {
                        snprintf(path, sizeof(path), "%s/d%03d", root, i / per_dir);
                        if (mkdir(path, 0755) < 0)
                                die(path);
                }
                snprintf(path, sizeof(path), "%s/d%03d/f%05d.txt", root, i / per_dir, i);
                int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                if (fd < 0 || al_write_full(fd, buf, size) < 0)
                        die(path);
                close(fd);
        }
        free(buf);
}

static void make_big_file(const char *path, uint64_t size)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0)
                die(path);
        size_t chunk = 1 << 20;
        char *buf = malloc(chunk);
        for (size_t i = 0; i < chunk; i++)
                buf[i] = (char)(i * 131 + 7);
        for (uint64_t done = 0; done < size; done += chunk)
                if (al_write_full(fd, buf, chunk) < 0)
                        die(path);
        free(buf);
        close(fd);
}

typedef struct row {
        const char *what;
        double airlock, cp;
        long rss;
} row;

/* Staging 10,000 files of 4 KiB below base, against cp -a. */
static row stage_small(const char *base, const char *what, int reps)
{
        char root[256], small[300], dst[300];
        snprintf(root, sizeof(root), "%s/bench-fsx.XXXXXX", base);
        if (!mkdtemp(root))
                die(root);
        snprintf(small, sizeof(small), "%s/small", root);
        snprintf(dst, sizeof(dst), "%s/dst", root);
        double a[9], c[9];
        make_tree(small, 10000, 4096);
        for (int i = 0; i < reps; i++) {
                /* Alternate who goes first, so drift and cache state hit
                 * both alike; every timed copy starts after a sync, so no
                 * one pays for the other's write-back. */
                if (i % 2) {
                        c[i] = time_cp(small, dst);
                        a[i] = time_stage(small, true, dst);
                } else {
                        a[i] = time_stage(small, true, dst);
                        c[i] = time_cp(small, dst);
                }
        }
        rm_rf(root);
        return (row){what, median(a, reps), median(c, reps), 0};
}

/* Restaging 10,000 files of 4 KiB after one of them was edited, reusing the
 * previous staged copy (hard links for the 9,999 unchanged files), against
 * cp -a of the whole tree. */
static row restage_small(const char *base, int reps)
{
        char root[256], small[300], prev[300], dst[300], edit[400];
        snprintf(root, sizeof(root), "%s/bench-fsx.XXXXXX", base);
        if (!mkdtemp(root))
                die(root);
        snprintf(small, sizeof(small), "%s/small", root);
        snprintf(prev, sizeof(prev), "%s/prev", root);
        snprintf(dst, sizeof(dst), "%s/dst", root);
        snprintf(edit, sizeof(edit), "%s/d042/f04200.txt", small);
        make_tree(small, 10000, 4096);
        if (mkdir(prev, 0755) < 0)
                die(prev);
        int pfd = open(prev, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        fsx_source s = {.host_path = small, .dest = NULL};
        fsx_limits lim = {.max_bytes = 4ull << 30, .max_files = 1000000, .max_depth = 256};
        airlock_error err = {0};
        fsx_manifest *m = NULL;
        if (pfd < 0 ||
            fsx_stage_reuse(pfd, &s, 1, &lim, (uid_t)-1, (gid_t)-1, -1, NULL, &m, NULL, &err) < 0) {
                fprintf(stderr, "bench_fsx: staging %s: %s\n", small, err.message);
                exit(1);
        }
        double a[9], c[9];
        for (int i = 0; i < reps; i++) {
                int fd = open(edit, O_WRONLY | O_APPEND | O_CLOEXEC);
                if (fd < 0 || write(fd, "e", 1) != 1)
                        die(edit);
                close(fd);
                c[i] = time_cp(small, dst);
                rm_rf(dst);
                if (mkdir(dst, 0755) < 0)
                        die(dst);
                int dfd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                fsx_stage_stats st = {0};
                sync();
                double t = now_ms();
                int r = fsx_stage_reuse(dfd, &s, 1, &lim, (uid_t)-1, (gid_t)-1, pfd, m, NULL, &st,
                                        &err);
                a[i] = now_ms() - t;
                close(dfd);
                if (r < 0 || st.reused != 9999) {
                        fprintf(stderr, "bench_fsx: restaging: %s (%llu reused)\n", err.message,
                                (unsigned long long)st.reused);
                        exit(1);
                }
        }
        fsx_manifest_free(m);
        close(pfd);
        rm_rf(root);
        return (row){"restage 10,000 files of 4 KiB after one edit (links to the previous copy)",
                     median(a, reps), median(c, reps), 0};
}

/* Where the time of the call after a one-file edit goes (bench_workspace.py
 * times the whole call): with a workspace of 10,000 files of 1 KiB in 100
 * folders, made 4 s before its first staging (as an existing repository
 * is), each part after one edit, median of reps. */
static void edit_parts(const char *base, int reps)
{
        char root[256], ws[300], edit[400];
        snprintf(root, sizeof(root), "%s/bench-fsx.XXXXXX", base);
        if (!mkdtemp(root))
                die(root);
        snprintf(ws, sizeof(ws), "%s/ws", root);
        snprintf(edit, sizeof(edit), "%s/d042/f04200.txt", ws);
        make_tree(ws, 10000, 1024);
        sleep(4);
        fsx_limits lim = {.max_bytes = 4ull << 30, .max_files = 1000000, .max_depth = 256};
        airlock_error err = {0};
        fsx_source s = {.host_path = ws, .dest = NULL};
        fsx_staging area;
        fsx_manifest *m = NULL;
        int fd;
        if (fsx_staging_create(root, &s, 1, &lim, (uid_t)-1, (gid_t)-1, -1, NULL, &area, &fd, &m,
                               &err) < 0) {
                fprintf(stderr, "bench_fsx: staging %s: %s\n", ws, err.message);
                exit(1);
        }
        const char *paths[] = {ws};
        fsx_watch *w = NULL;
        char hex[1][FSX_SIGNATURE_HEX];
        if (fsx_watch_new(paths, 1, &lim, 64 << 10, &w, &err) < 0 ||
            fsx_watch_signatures(w, hex, NULL, &err) < 0) {
                fprintf(stderr, "bench_fsx: watch: %s\n", err.message);
                exit(1);
        }
        double full[9], part[9], links[9], rm_links[9], inplace[9];
        for (int i = 0; i < reps; i++) {
                int efd = open(edit, O_WRONLY | O_APPEND | O_CLOEXEC);
                if (efd < 0 || write(efd, "e", 1) != 1)
                        die(edit);
                close(efd);
                double t = now_ms();
                if (fsx_watch_signatures(w, hex, NULL, &err) < 0)
                        exit(1);
                part[i] = now_ms() - t;
                t = now_ms();
                if (fsx_tree_signature(ws, &lim, 64 << 10, hex[0], &err) < 0)
                        exit(1);
                full[i] = now_ms() - t;
                /* The rebuild as it was: a new tree of hard links to the
                 * previous copy, then that copy removed. */
                fsx_staging next;
                int nfd;
                t = now_ms();
                if (fsx_staging_create(root, &s, 1, &lim, (uid_t)-1, (gid_t)-1, fd, m, &next, &nfd,
                                       NULL, &err) < 0)
                        exit(1);
                links[i] = now_ms() - t;
                close(nfd);
                t = now_ms();
                fsx_staging_remove(&next);
                rm_links[i] = now_ms() - t;
                /* The rebuild of an idle copy: updated in place. */
                fsx_manifest *m2 = NULL;
                close(fd);
                t = now_ms();
                if (fsx_staging_take(&area, &s, &lim, (uid_t)-1, (gid_t)-1, m, &next, &fd, &m2,
                                     NULL, &err) < 0) {
                        fprintf(stderr, "bench_fsx: in place: %s\n", err.message);
                        exit(1);
                }
                inplace[i] = now_ms() - t;
                fsx_manifest_free(m);
                m = m2;
                area = next;
        }
        close(fd);
        fsx_manifest_free(m);
        fsx_watch_free(w);
        fsx_staging_remove(&area);
        rm_rf(root);
        printf("\n| the call after a one-file edit of 10,000 files of 1 KiB, by part (median of "
               "%d) | ms |\n|---|---:|\n",
               reps);
        printf("| full signature walk (before: every event) | %.1f |\n", median(full, reps));
        printf("| signature of only the folder the events named | %.2f |\n", median(part, reps));
        printf("| rebuild as a new tree of hard links (before) | %.1f |\n", median(links, reps));
        printf("| removing the stale copy after that (beside the run) | %.1f |\n",
               median(rm_links, reps));
        printf("| rebuild of the idle copy in place | %.1f |\n", median(inplace, reps));
        printf("\nThe rest of that call is starting the new template, about the cold "
               "`airlock run` of bench_workspace.py.\n");
}

static const char *fs_name(const char *path)
{
        struct statfs sf;
        if (statfs(path, &sf) < 0)
                return "?";
        switch ((unsigned long)sf.f_type) {
        case 0xEF53:
                return "ext4";
        case 0x01021994:
                return "tmpfs";
        case 0x58465342:
                return "xfs";
        case 0x9123683E:
                return "btrfs";
        case 0x794c7630:
                return "overlayfs";
        }
        return "other";
}

int main(int argc, char **argv)
{
        const char *base = "/tmp";
        bool quick = false;
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--quick") == 0)
                        quick = true;
                else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
                        base = argv[++i];
                else {
                        fprintf(stderr, "usage: bench_fsx [--quick] [--dir DIR]\n");
                        return 2;
                }
        }
        int reps = quick ? 3 : 5;
        uint64_t big_size = quick ? 256ull << 20 : 1ull << 30;
        row rows[6];
        int n_rows = 0;
        double a[9], c[9];
        char label[128];

        snprintf(label, sizeof(label), "stage 10,000 files of 4 KiB (%s)", fs_name(base));
        rows[n_rows++] = stage_small(base, strdup(label), reps);
        /* The same on tmpfs, where the disk and its other users do not
         * blur the comparison, when there is room. */
        struct statvfs vfs;
        if (strcmp(fs_name(base), "tmpfs") != 0 && statvfs("/dev/shm", &vfs) == 0 &&
            (uint64_t)vfs.f_bavail * vfs.f_frsize > (512ull << 20))
                rows[n_rows++] =
                    stage_small("/dev/shm", "stage 10,000 files of 4 KiB (tmpfs)", reps);

        rows[n_rows++] = restage_small(base, reps);

        char root[256];
        snprintf(root, sizeof(root), "%s/bench-fsx.XXXXXX", base);
        if (!mkdtemp(root))
                die(root);
        char tiny[300], big[300], dst[300];
        snprintf(tiny, sizeof(tiny), "%s/tiny", root);
        snprintf(big, sizeof(big), "%s/big.bin", root);
        snprintf(dst, sizeof(dst), "%s/dst", root);

        make_big_file(big, big_size);
        int big_reps = quick ? 1 : 5; /* as the header says: the median of 5 */
        for (int cold = 0; cold < 2; cold++) {
                cache_state = cold ? CACHE_COLD : CACHE_WARM;
                for (int i = 0; i < big_reps; i++) {
                        if (i % 2) {
                                c[i] = time_cp(big, dst);
                                a[i] = time_stage(big, false, dst);
                        } else {
                                a[i] = time_stage(big, false, dst);
                                c[i] = time_cp(big, dst);
                        }
                }
                const char *what[2][2] = {{"stage one 1 GiB file, source in the page cache",
                                           "stage one 1 GiB file, source read from the disk"},
                                          {"stage one 256 MiB file, source in the page cache",
                                           "stage one 256 MiB file, source read from the disk"}};
                rows[n_rows++] =
                    (row){what[quick][cold], median(a, big_reps), median(c, big_reps), 0};
        }
        cache_state = CACHE_ANY;
        rm_rf(dst);
        unlink(big);

        make_tree(tiny, 10000, 1024);
        long rss[9];
        for (int i = 0; i < reps; i++) {
                a[i] = time_capture(tiny, &rss[i]);
                c[i] = time_cp(tiny, dst);
        }
        long max_rss = 0;
        for (int i = 0; i < reps; i++)
                max_rss = MAX(max_rss, rss[i]);
        rows[n_rows++] =
            (row){"capture 10,000 files of 1 KiB", median(a, reps), median(c, reps), max_rss};
        rm_rf(root);

        printf("| file transfer (median of %d) | airlock ms | cp -a ms | ratio | peak RSS |\n",
               reps);
        printf("|---|---:|---:|---:|---:|\n");
        for (int i = 0; i < n_rows; i++) {
                char rs[32] = "";
                if (rows[i].rss)
                        snprintf(rs, sizeof(rs), "%.1f MiB", (double)rows[i].rss / 1024);
                printf("| %s | %.1f | %.1f | %.2f | %s |\n", rows[i].what, rows[i].airlock,
                       rows[i].cp, rows[i].airlock / rows[i].cp, rs);
        }
        printf("\nData under %s (%s); ratio below 1: airlock faster. Capture target: under "
               "100 ms; its peak RSS is that of a process doing only the capture.\n",
               base, fs_name(base));
        edit_parts(base, reps);
        return 0;
}
