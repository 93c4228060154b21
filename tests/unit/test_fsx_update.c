/* Rebuilds in place (fsx_stage_update): the previous staged copy is updated
 * where it stands. Unchanged files keep their inode (and one link), changed
 * ones are new copies, what the source lost is removed from the copy (files,
 * whole folders, and entries that became kinds staging skips), a file that
 * became a folder and the other way round are replaced, and the fail-closed
 * rules of staging still hold. The result must hold exactly what a fresh
 * staging of the same tree holds. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/fsx_test.h"

static const fsx_limits lim = {.max_bytes = 64 << 20, .max_files = 1000, .max_depth = 16};

typedef struct ut {
        scratch s;
        char ws[128];
        int wfd;
        fsx_manifest *m; /* of the copy in "a" */
} ut;

static int update(ut *t, fsx_stage_stats *st, airlock_error *err)
{
        int dfd = open_dir(t->s.fd, "a");
        fsx_source src = {t->ws, NULL};
        fsx_manifest *m2 = NULL;
        int r = fsx_stage_update(dfd, &src, &lim, (uid_t)-1, (gid_t)-1, t->m, &m2, st, err);
        close(dfd);
        if (r >= 0) {
                fsx_manifest_free(t->m);
                t->m = m2;
        }
        return r;
}

static int setup(void **state)
{
        ut *t = calloc(1, sizeof(*t));
        scratch_new(&t->s);
        put_dir(t->s.fd, "ws");
        put_dir(t->s.fd, "ws/sub");
        put_dir(t->s.fd, "ws/sub/deep");
        put_file(t->s.fd, "ws/a.txt", "hello");
        put_file(t->s.fd, "ws/sub/b.txt", "world");
        put_file(t->s.fd, "ws/sub/deep/c.txt", "deep");
        put_file(t->s.fd, "ws/becomes_dir", "file");
        put_dir(t->s.fd, "ws/becomes_file");
        put_file(t->s.fd, "ws/becomes_file/x", "x");
        put_bytes(t->s.fd, "ws/big.bin", 200000, 'z');
        snprintf(t->ws, sizeof(t->ws), "%s/ws", t->s.path);
        t->wfd = open_dir(t->s.fd, "ws");
        put_dir(t->s.fd, "a");
        int dfd = open_dir(t->s.fd, "a");
        fsx_source src = {t->ws, NULL};
        airlock_error err = {0};
        assert_int_equal(
            fsx_stage_reuse(dfd, &src, 1, &lim, (uid_t)-1, (gid_t)-1, -1, NULL, &t->m, NULL, &err),
            0);
        close(dfd);
        *state = t;
        return 0;
}

static int teardown(void **state)
{
        ut *t = *state;
        fsx_manifest_free(t->m);
        close(t->wfd);
        scratch_free(&t->s);
        free(t);
        return 0;
}

static struct stat stat_of(int dfd, const char *rel)
{
        struct stat st;
        if (fstatat(dfd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0)
                fail_msg("%s: %s", rel, strerror(errno));
        return st;
}

static bool exists(int dfd, const char *rel)
{
        struct stat st;
        return fstatat(dfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Appends "rel type size content-or-nothing" lines for every entry below
 * dfd, sorted, for comparing two trees. */
static void describe(int dfd, const char *rel, char *out, size_t cap)
{
        int fd = rel[0] ? openat(dfd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) : dup(dfd);
        assert_true(fd >= 0);
        DIR *d = fdopendir(fd);
        assert_non_null(d);
        char names[64][256];
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && n < 64)
                        assert_true(snprintf(names[n++], 256, "%s", de->d_name) < 256);
        qsort(names, (size_t)n, 256, (int (*)(const void *, const void *))strcmp);
        for (int i = 0; i < n; i++) {
                char p[512];
                assert_true(snprintf(p, sizeof(p), "%s%s%s", rel, rel[0] ? "/" : "", names[i]) <
                            (int)sizeof(p));
                struct stat st = stat_of(dfd, p);
                size_t l = strlen(out);
                snprintf(out + l, cap - l, "%s %o %lld\n", p, (unsigned)st.st_mode,
                         (long long)(S_ISDIR(st.st_mode) ? 0 : st.st_size));
                if (S_ISDIR(st.st_mode))
                        describe(dfd, p, out, cap);
        }
        closedir(d);
}

/* Updated in place, the copy equals a fresh staging of the source. */
static void expect_like_fresh(ut *t)
{
        airlock_error e = {0};
        assert_int_equal(fsx_remove_at(t->s.fd, "fresh", &e), 0);
        put_dir(t->s.fd, "fresh");
        int ffd = open_dir(t->s.fd, "fresh");
        fsx_source src = {t->ws, NULL};
        assert_int_equal(fsx_stage(ffd, &src, 1, &lim, (uid_t)-1, (gid_t)-1, NULL, &e), 0);
        int afd = open_dir(t->s.fd, "a");
        static char want[16384], got[16384];
        want[0] = got[0] = '\0';
        describe(ffd, "", want, sizeof(want));
        describe(afd, "", got, sizeof(got));
        assert_string_equal(got, want);
        close(ffd);
        close(afd);
}

static void test_unchanged_files_keep_their_inode(void **state)
{
        ut *t = *state;
        ino_t a = stat_of(t->s.fd, "a/a.txt").st_ino,
              c = stat_of(t->s.fd, "a/sub/deep/c.txt").st_ino;
        put_file(t->wfd, "sub/b.txt", "WORLD!");
        fsx_stage_stats st = {0};
        airlock_error err = {0};
        assert_int_equal(update(t, &st, &err), 0);
        assert_int_equal(st.files, 6);
        assert_int_equal(st.reused, 5);
        assert_int_equal(stat_of(t->s.fd, "a/a.txt").st_ino, a);
        assert_int_equal(stat_of(t->s.fd, "a/sub/deep/c.txt").st_ino, c);
        /* Kept, not linked: the guest sees one link. */
        assert_int_equal(stat_of(t->s.fd, "a/a.txt").st_nlink, 1);
        char *b = get_file(t->s.fd, "a/sub/b.txt");
        assert_string_equal(b, "WORLD!");
        free(b);
        expect_like_fresh(t);
        /* The new manifest serves the next update. */
        assert_int_equal(update(t, &st, &err), 0);
        assert_int_equal(st.reused, 6);
}

static void test_what_the_source_lost_is_removed(void **state)
{
        ut *t = *state;
        airlock_error e = {0};
        assert_int_equal(unlinkat(t->wfd, "a.txt", 0), 0);
        assert_int_equal(fsx_remove_at(t->wfd, "sub", &e), 0);
        /* A file that became a folder, a folder that became a file, a file
         * that became a FIFO (skipped by staging, so gone from the copy). */
        assert_int_equal(unlinkat(t->wfd, "becomes_dir", 0), 0);
        put_dir(t->wfd, "becomes_dir");
        put_file(t->wfd, "becomes_dir/inside", "in");
        assert_int_equal(fsx_remove_at(t->wfd, "becomes_file", &e), 0);
        put_file(t->wfd, "becomes_file", "now a file");
        assert_int_equal(unlinkat(t->wfd, "big.bin", 0), 0);
        put_fifo(t->wfd, "big.bin");
        put_file(t->wfd, "new.txt", "new");
        fsx_stage_stats st = {0};
        airlock_error err = {0};
        assert_int_equal(update(t, &st, &err), 0);
        assert_false(exists(t->s.fd, "a/a.txt"));
        assert_false(exists(t->s.fd, "a/sub"));
        assert_false(exists(t->s.fd, "a/big.bin"));
        assert_true(S_ISDIR(stat_of(t->s.fd, "a/becomes_dir").st_mode));
        assert_true(S_ISREG(stat_of(t->s.fd, "a/becomes_file").st_mode));
        expect_like_fresh(t);
}

/* Directory modes come back after the update, read-only ones included. */
static void test_directory_metadata_is_set_again(void **state)
{
        ut *t = *state;
        assert_int_equal(fchmodat(t->wfd, "sub/deep", 0555, 0), 0);
        put_file(t->wfd, "sub/new.txt", "n");
        fsx_stage_stats st = {0};
        airlock_error err = {0};
        assert_int_equal(update(t, &st, &err), 0);
        assert_int_equal(stat_of(t->s.fd, "a/sub/deep").st_mode & 0777, 0555);
        expect_like_fresh(t);
        assert_int_equal(fchmodat(t->wfd, "sub/deep", 0755, 0), 0);
        assert_int_equal(update(t, &st, &err), 0);
        expect_like_fresh(t);
}

static void test_a_link_still_fails_closed(void **state)
{
        ut *t = *state;
        assert_int_equal(unlinkat(t->wfd, "sub/b.txt", 0), 0);
        put_link(t->wfd, "sub/b.txt", "/etc/passwd");
        fsx_stage_stats st = {0};
        airlock_error err = {0};
        assert_int_equal(update(t, &st, &err), -ELOOP);
        assert_non_null(strstr(err.message, "sub/b.txt"));
}

/* Mounts are refused: an entry already in the copy could be a collision. */
static void test_mounts_are_refused(void **state)
{
        ut *t = *state;
        int dfd = open_dir(t->s.fd, "a");
        fsx_source src = {t->ws, "mnt"};
        airlock_error err = {0};
        assert_int_equal(
            fsx_stage_update(dfd, &src, &lim, (uid_t)-1, (gid_t)-1, t->m, NULL, NULL, &err),
            -EINVAL);
        close(dfd);
}

/* A file replaced by a folder between its listing and its open, once (the
 * staging fails -ESTALE, "changed while it was staged"): the staging is
 * tried again instead of failing the build, in place and into a new area
 * alike. */
static int replaced;
static void replace_once(int parent_fd, const char *name)
{
        if (replaced || strcmp(name, "a.txt") != 0)
                return;
        replaced++;
        assert_int_equal(unlinkat(parent_fd, "a.txt", 0), 0);
        put_dir(parent_fd, "a.txt");
        put_file(parent_fd, "a.txt/inner", "replaced");
}

static void test_a_file_replaced_while_staged_is_staged_again(void **state)
{
        ut *t = *state;
        put_file(t->wfd, "a.txt", "edited");
        fsx_staging area = {.parent_fd = dup(t->s.fd), .name = strdup("area")};
        put_dir(t->s.fd, "area");
        assert_int_equal(renameat(t->s.fd, "a", t->s.fd, "area/input"), 0);
        fsx_source src = {t->ws, NULL};
        fsx_staging next;
        int fd = -1;
        fsx_manifest *m2 = NULL;
        airlock_error err = {0};
        replaced = 0;
        fsx_stage_file_hook = replace_once;
        int r = fsx_staging_take(&area, &src, &lim, (uid_t)-1, (gid_t)-1, t->m, &next, &fd, &m2,
                                 NULL, &err);
        fsx_stage_file_hook = NULL;
        assert_int_equal(r, 0);
        assert_int_equal(replaced, 1);
        char *a = get_file(fd, "a.txt/inner");
        assert_string_equal(a, "replaced");
        free(a);
        close(fd);
        /* The same for a new area. */
        fsx_staging fresh;
        replaced = 0;
        airlock_error e = {0};
        assert_int_equal(fsx_remove_at(t->wfd, "a.txt", &e), 0);
        put_file(t->wfd, "a.txt", "edited again");
        fsx_stage_file_hook = replace_once;
        r = fsx_staging_create(t->s.path, &src, 1, &lim, (uid_t)-1, (gid_t)-1, -1, NULL, &fresh,
                               &fd, NULL, &err);
        fsx_stage_file_hook = NULL;
        assert_int_equal(r, 0);
        assert_int_equal(replaced, 1);
        a = get_file(fd, "a.txt/inner");
        assert_string_equal(a, "replaced");
        free(a);
        close(fd);
        fsx_staging_remove(&fresh);
        fsx_staging_remove(&next);
        fsx_manifest_free(m2);
}

/* A device node put in a file's place between its listing and its open,
 * on a file system where another machine may have made it (a network or
 * FUSE one mounted without nodev, here forced): never opened, and what is
 * staged is the tree as the staging tried again finds it. Before, the walk
 * opened what the listing had said was a file, and checked its type
 * after. */
static int swapped = -1; /* the inotify fd watching the node, once made */
static void swap_in_device(int parent_fd, const char *name)
{
        if (swapped >= 0 || strcmp(name, "a.txt") != 0)
                return;
        assert_int_equal(unlinkat(parent_fd, "a.txt", 0), 0);
        if (!put_null_device(parent_fd, "a.txt"))
                put_fifo(parent_fd, "a.txt"); /* not root: a FIFO's open shows alike */
        swapped = watch_opens(parent_fd, "a.txt");
}

static void test_a_device_put_in_a_files_place_after_its_listing_is_never_opened(void **state)
{
        ut *t = *state;
        fsx_source src = {t->ws, NULL};
        fsx_staging fresh;
        int fd = -1;
        airlock_error err = {0};
        swapped = -1;
        fsx_force_foreign_devices = true;
        fsx_stage_file_hook = swap_in_device;
        int r = fsx_staging_create(t->s.path, &src, 1, &lim, (uid_t)-1, (gid_t)-1, -1, NULL, &fresh,
                                   &fd, NULL, &err);
        fsx_stage_file_hook = NULL;
        fsx_force_foreign_devices = false;
        assert_true(swapped >= 0);
        assert_false(opened_since(swapped));
        close(swapped);
        assert_int_equal(r, 0);
        struct stat st;
        assert_int_equal(fstatat(fd, "a.txt", &st, AT_SYMLINK_NOFOLLOW), -1); /* skipped */
        char *b = get_file(fd, "sub/b.txt");
        assert_string_equal(b, "world");
        free(b);
        close(fd);
        fsx_staging_remove(&fresh);
}

/* Bytes and files copied into a directory of the copy, not counting "." */
static void tally(int dfd, const char *rel, uint64_t *bytes, uint64_t *files)
{
        int fd = openat(dfd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        assert_true(fd >= 0);
        DIR *d = fdopendir(fd);
        assert_non_null(d);
        struct dirent *de;
        *bytes = *files = 0;
        while ((de = readdir(d))) {
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode)) {
                        *bytes += (uint64_t)st.st_size;
                        (*files)++;
                }
        }
        closedir(d);
}

/* A delta (fsx_stage_delta) that a directory's new files take past the
 * staging caps hands the version to a full staging (which names the cap),
 * having copied no more than the caps allow: a workspace that gains many
 * large or many small files in one directory must not make the host copy
 * them all before the totals are checked. */
static void test_a_delta_copies_no_more_than_the_caps(void **state)
{
        ut *t = *state;
        const fsx_limits small = {.max_bytes = 1 << 20, .max_files = 40, .max_depth = 16};
        for (int i = 0; i < 6; i++) {
                char n[32];
                snprintf(n, sizeof(n), "sub/big%d", i);
                put_bytes(t->wfd, n, 400 << 10, 'q');
        }
        for (int i = 0; i < 200; i++) {
                char n[32];
                snprintf(n, sizeof(n), "sub/deep/f%d", i);
                put_file(t->wfd, n, "x");
        }
        const char *dirs[] = {"sub", "sub/deep"};
        for (int k = 0; k < 2; k++) {
                int dfd = open_dir(t->s.fd, "a");
                fsx_manifest *m2 = NULL;
                fsx_stage_stats st = {0};
                airlock_error err = {0};
                int r = fsx_stage_delta(dfd, NULL, 0, t->ws, &dirs[k], 1, NULL, 0, NULL, &small,
                                        (uid_t)-1, (gid_t)-1, t->m, &m2, &st, &err);
                assert_int_equal(r, 1);
                assert_null(m2);
                uint64_t bytes, files;
                tally(dfd, dirs[k], &bytes, &files);
                assert_true(bytes <= small.max_bytes);
                assert_true(files <= small.max_files);
                close(dfd);
        }
}

/* A file told changed alone (fsx_stage_delta's files) that is not a
 * regular file, a FIFO or a device node put in a file's place on a shared
 * volume, hands the version to a full staging without being opened.
 * Before, it was opened first and its type checked after: a device node's
 * open opened a device of this machine's. */
static void test_a_told_file_that_is_no_regular_file_is_never_opened(void **state)
{
        ut *t = *state;
        put_fifo(t->wfd, "fifo");
        bool dev = put_null_device(t->wfd, "sub/dev");
        const char *files[] = {"fifo", "sub/dev"};
        for (size_t i = 0; i < (dev ? 2u : 1u); i++) {
                int ifd = watch_opens(t->wfd, files[i]);
                int dfd = open_dir(t->s.fd, "a");
                fsx_manifest *m2 = NULL;
                fsx_stage_stats st = {0};
                airlock_error err = {0};
                int r = fsx_stage_delta(dfd, NULL, 0, t->ws, NULL, 0, &files[i], 1, NULL, &lim,
                                        (uid_t)-1, (gid_t)-1, t->m, &m2, &st, &err);
                assert_int_equal(r, 1);
                assert_null(m2);
                assert_false(opened_since(ifd));
                close(ifd);
                close(dfd);
        }
        if (!dev)
                skip(); /* the FIFO was checked; a device node needs root */
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_unchanged_files_keep_their_inode, setup, teardown),
            cmocka_unit_test_setup_teardown(test_what_the_source_lost_is_removed, setup, teardown),
            cmocka_unit_test_setup_teardown(test_directory_metadata_is_set_again, setup, teardown),
            cmocka_unit_test_setup_teardown(test_a_link_still_fails_closed, setup, teardown),
            cmocka_unit_test_setup_teardown(test_mounts_are_refused, setup, teardown),
            cmocka_unit_test_setup_teardown(test_a_file_replaced_while_staged_is_staged_again,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_a_delta_copies_no_more_than_the_caps, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(
                test_a_told_file_that_is_no_regular_file_is_never_opened, setup, teardown),
            cmocka_unit_test_setup_teardown(
                test_a_device_put_in_a_files_place_after_its_listing_is_never_opened, setup,
                teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
