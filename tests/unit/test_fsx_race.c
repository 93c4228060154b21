/* Race tests: while staging, signatures and capture run again and again, a
 * second thread swaps files and parent directories for links to a directory
 * outside the tree that holds a SECRET file (and a file for a FIFO), with
 * renameat2(RENAME_EXCHANGE), so every instant shows one or the other. The
 * outcome of each run may differ (success, "symlink", "changed"), but no
 * byte of the secret may ever reach staged or captured data, and nothing
 * may hang. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/fsx_test.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>

#define MARKER     "SECRET-7f3a"
#define ROUNDS     300
#define TREE_FILES 20

typedef struct race {
        scratch s;
        int tree; /* the tree under attack ("tree") */
        int alt;  /* outside it: the links that get swapped in ("alt") */
        int dir;  /* the real "tree/d", for the swapper */
        atomic_bool stop;
        atomic_ulong swaps;
} race;

/* Builds s/secret/{f*,key} (all holding the marker), s/tree/d/f* (public),
 * s/tree/d/fifo-slot (a file), and s/alt with a link for every slot. */
static void race_build(race *r)
{
        scratch_new(&r->s);
        int s = r->s.fd;
        put_dir(s, "secret");
        put_dir(s, "tree");
        put_dir(s, "tree/d");
        put_dir(s, "alt");
        for (int i = 0; i < TREE_FILES; i++) {
                char name[64], target[160];
                snprintf(name, sizeof(name), "secret/f%02d", i);
                put_file(s, name, MARKER " " MARKER);
                snprintf(name, sizeof(name), "tree/d/f%02d", i);
                put_file(s, name, "public data");
                /* Absolute targets: the links point at the secret wherever
                 * they are moved to. */
                snprintf(name, sizeof(name), "alt/f%02d", i);
                snprintf(target, sizeof(target), "%s/secret/f%02d", r->s.path, i);
                put_link(s, name, target);
        }
        put_file(s, "tree/d/fifo-slot", "public data");
        put_fifo(s, "alt/fifo-slot");
        char target[160];
        snprintf(target, sizeof(target), "%s/secret", r->s.path);
        put_link(s, "alt/d", target);
        r->tree = open_dir(s, "tree");
        r->alt = open_dir(s, "alt");
        r->dir = open_dir(s, "tree/d");
}

static void race_free(race *r)
{
        close(r->tree);
        close(r->alt);
        close(r->dir);
        scratch_free(&r->s);
}

static void *swapper(void *arg)
{
        race *r = arg;
        /* No cmocka assertions in this thread: failures are the main
         * thread's to report. The fd on the real directory is opened before
         * the thread starts and refreshed when a new "d" appears (the
         * clearing test removes and recreates it). */
        int dir = r->dir;
        unsigned long n = 0;
        while (!atomic_load(&r->stop)) {
                int fresh = openat(r->tree, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fresh >= 0) {
                        close(dir);
                        dir = fresh;
                }
                /* Files for links and back (through an fd on the real
                 * directory, valid wherever it is); then the parent
                 * directory itself for a link, held for about as long
                 * while its files keep moving, and back. */
                for (int half = 0; half < 2; half++) {
                        for (int i = 0; i < TREE_FILES; i++) {
                                char name[16];
                                snprintf(name, sizeof(name), "f%02d", i);
                                renameat2(dir, name, r->alt, name, RENAME_EXCHANGE);
                                renameat2(dir, name, r->alt, name, RENAME_EXCHANGE);
                        }
                        renameat2(dir, "fifo-slot", r->alt, "fifo-slot", RENAME_EXCHANGE);
                        renameat2(r->tree, "d", r->alt, "d", RENAME_EXCHANGE);
                }
                n++;
        }
        r->dir = dir;
        atomic_store(&r->swaps, n);
        return NULL;
}

/* Fails the test if any file below dfd (our own tree) holds the marker. */
static void assert_no_secret(int dfd)
{
        int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fdopendir(fd);
        assert_non_null(d);
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.' &&
                    (!de->d_name[1] || (de->d_name[1] == '.' && !de->d_name[2])))
                        continue;
                struct stat st;
                assert_int_equal(fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW), 0);
                if (S_ISDIR(st.st_mode)) {
                        int sub = open_dir(dirfd(d), de->d_name);
                        assert_no_secret(sub); /* our staged tree is shallow */
                        close(sub);
                } else {
                        assert_true(S_ISREG(st.st_mode));
                        char *data = get_file(dirfd(d), de->d_name);
                        assert_non_null(data);
                        if (strstr(data, "SECRET"))
                                fail_msg("secret staged as %s", de->d_name);
                        free(data);
                }
        }
        closedir(d);
}

static void test_race_stage_and_signature(void **state)
{
        race r = {0};
        race_build(&r);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, swapper, &r), 0);

        char ws[128];
        snprintf(ws, sizeof(ws), "%s/tree", r.s.path);
        fsx_source src[] = {{.host_path = ws}};
        fsx_limits lim = {.max_bytes = 1 << 20, .max_files = 1000, .max_depth = 8};
        unsigned ok = 0, link = 0, changed = 0, other = 0;
        for (int i = 0; i < ROUNDS; i++) {
                airlock_error err = {0};
                assert_int_equal(fsx_remove_at(r.s.fd, "dest", &err), 0);
                put_dir(r.s.fd, "dest");
                int dest = open_dir(r.s.fd, "dest");
                int rc = fsx_stage(dest, src, 1, &lim, (uid_t)-1, (gid_t)-1, NULL, &err);
                if (rc == 0)
                        ok++;
                else if (rc == -ELOOP)
                        link++;
                else if (rc == -ESTALE)
                        changed++;
                else
                        other++; /* e.g. ENOENT: a name moved away mid-walk */
                /* Even a failed staging leaves what it copied: check it all. */
                assert_no_secret(dest);
                close(dest);
                char hex[FSX_SIGNATURE_HEX];
                fsx_tree_signature(ws, &lim, 4096, hex, &err);
        }
        atomic_store(&r.stop, true);
        pthread_join(t, NULL);
        print_message("stage: %u ok, %u symlink, %u changed, %u other; %lu swap rounds\n", ok, link,
                      changed, other, (unsigned long)atomic_load(&r.swaps));
        assert_int_equal(ok + link + changed + other, ROUNDS);
        race_free(&r);
}

static void test_race_capture(void **state)
{
        race r = {0};
        race_build(&r);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, swapper, &r), 0);

        fsx_limits lim = {
            .max_bytes = 1 << 20, .max_files = 1000, .max_depth = 8, .max_file = 4096};
        unsigned files = 0, refusals = 0;
        for (int i = 0; i < ROUNDS; i++) {
                airlock_file *f = NULL;
                airlock_refusal *rf = NULL;
                size_t nf = 0, nr = 0;
                airlock_error err = {0};
                int rc = fsx_capture(r.tree, &lim, &f, &nf, &rf, &nr, &err);
                if (rc < 0 && rc != -ENOENT)
                        fail_msg("capture: %s", err.message);
                for (size_t k = 0; k < nf; k++) {
                        assert_int_equal(f[k].size, strlen("public data"));
                        assert_memory_equal(f[k].data, "public data", f[k].size);
                }
                for (size_t k = 0; k < nr; k++) {
                        const char *why = rf[k].reason;
                        if (strcmp(why, "symlink") && strcmp(why, "not a regular file") &&
                            strcmp(why, "changed while reading"))
                                fail_msg("unexpected refusal %s: %s", rf[k].path, why);
                }
                files += (unsigned)nf;
                refusals += (unsigned)nr;
                fsx_files_free(f, nf);
                fsx_refused_free(rf, nr);
        }
        atomic_store(&r.stop, true);
        pthread_join(t, NULL);
        print_message("capture: %u files, %u refusals; %lu swap rounds\n", files, refusals,
                      (unsigned long)atomic_load(&r.swaps));
        race_free(&r);
}

/* Makes dfd/name a link to target again: when the clearing removed a link
 * that was swapped into the tree, the real entry stayed on the other side,
 * and without this the swapper would go on exchanging real for real. */
static void relink(int dfd, const char *name, const char *target)
{
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISLNK(st.st_mode))
                fsx_remove_at(dfd, name, NULL);
        (void)!symlinkat(target, dfd, name);
}

/* Clearing while the tree's directory and files are swapped for links to
 * the secret directory: links are unlinked, never followed, so every secret
 * file survives every round. */
static void test_race_clear(void **state)
{
        race r = {0};
        race_build(&r);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, swapper, &r), 0);
        char target[160];
        unsigned failed = 0;
        for (int i = 0; i < ROUNDS; i++) {
                /* Put back whatever the last round removed (names may exist
                 * or be mid-swap: errors here are expected). */
                mkdirat(r.tree, "d", 0755);
                int d = openat(r.tree, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                for (int k = 0; k < TREE_FILES && d >= 0; k++) {
                        char name[16];
                        snprintf(name, sizeof(name), "f%02d", k);
                        int fd = openat(d, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
                        if (fd >= 0)
                                close(fd);
                        snprintf(target, sizeof(target), "%s/secret/f%02d", r.s.path, k);
                        relink(r.alt, name, target);
                }
                if (d >= 0)
                        close(d);
                snprintf(target, sizeof(target), "%s/secret", r.s.path);
                relink(r.alt, "d", target);
                airlock_error err = {0};
                failed += fsx_clear_dir(r.tree, &err) < 0;
        }
        atomic_store(&r.stop, true);
        pthread_join(t, NULL);
        for (int k = 0; k < TREE_FILES; k++) {
                char name[32];
                snprintf(name, sizeof(name), "secret/f%02d", k);
                char *data = get_file(r.s.fd, name);
                if (!data)
                        fail_msg("%s was removed through a link", name);
                assert_string_equal(data, MARKER " " MARKER);
                free(data);
        }
        print_message("clear: %u of %d rounds reported an error; %lu swap rounds\n", failed, ROUNDS,
                      (unsigned long)atomic_load(&r.swaps));
        race_free(&r);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_race_stage_and_signature),
            cmocka_unit_test(test_race_capture),
            cmocka_unit_test(test_race_clear),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
