/* Cheap rebuilds (fsx_stage_reuse): unchanged files are hard links to the
 * previous staged copy, never to the source; anything changed (content,
 * metadata, identity) is copied again; the previous copy is checked before
 * it is trusted; the fail-closed rules of staging stay. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/fsx_test.h"

static const fsx_limits lim = {.max_bytes = 64 << 20, .max_files = 1000, .max_depth = 16};

typedef struct rt {
        scratch s;
        char ws[128];
        int wfd;
        fsx_manifest *m; /* of "a" */
} rt;

static int stage_into(rt *t, const char *name, const char *prev, fsx_manifest *pm,
                      fsx_manifest **ret_m, fsx_stage_stats *st, airlock_error *err)
{
        airlock_error e = {0};
        assert_int_equal(fsx_remove_at(t->s.fd, name, &e), 0);
        put_dir(t->s.fd, name);
        int dfd = open_dir(t->s.fd, name);
        int pfd = prev ? open_dir(t->s.fd, prev) : -1;
        fsx_source src[] = {{t->ws, NULL}, {t->ws, "mnt/copy"}};
        int r = fsx_stage_reuse(dfd, src, 2, &lim, (uid_t)-1, (gid_t)-1, pfd, pm, ret_m, st, err);
        close(dfd);
        if (pfd >= 0)
                close(pfd);
        return r;
}

static int setup(void **state)
{
        rt *t = calloc(1, sizeof(*t));
        scratch_new(&t->s);
        put_dir(t->s.fd, "ws");
        put_dir(t->s.fd, "ws/sub");
        put_file(t->s.fd, "ws/a.txt", "hello");
        put_file(t->s.fd, "ws/sub/b.txt", "world");
        put_bytes(t->s.fd, "ws/sub/big.bin", 200000, 'z');
        snprintf(t->ws, sizeof(t->ws), "%s/ws", t->s.path);
        t->wfd = open_dir(t->s.fd, "ws");
        fsx_stage_stats st = {0};
        airlock_error err = {0};
        assert_int_equal(stage_into(t, "a", NULL, NULL, &t->m, &st, &err), 0);
        assert_int_equal(st.files, 6);
        assert_int_equal(st.reused, 0);
        assert_int_equal(fsx_manifest_count(t->m), 6);
        *state = t;
        return 0;
}

static int teardown(void **state)
{
        rt *t = *state;
        fsx_manifest_free(t->m);
        close(t->wfd);
        scratch_free(&t->s);
        free(t);
        return 0;
}

static void expect_file_content(int dfd, const char *rel, const char *want)
{
        char *got = get_file(dfd, rel);
        if (!got)
                fail_msg("%s missing", rel);
        assert_string_equal(got, want);
        free(got);
}

static ino_t ino_of(int dfd, const char *rel)
{
        struct stat st;
        assert_int_equal(fstatat(dfd, rel, &st, AT_SYMLINK_NOFOLLOW), 0);
        return st.st_ino;
}

static void test_unchanged_files_are_links_to_the_previous_copy(void **state)
{
        rt *t = *state;
        fsx_manifest *m2 = NULL;
        fsx_stage_stats st = {0};
        airlock_error err = {0};
        assert_int_equal(stage_into(t, "b", "a", t->m, &m2, &st, &err), 0);
        assert_int_equal(st.files, 6);
        assert_int_equal(st.reused, 6);
        assert_int_equal(st.bytes, 2 * (5 + 5 + 200000));
        const char *rels[] = {"a.txt", "sub/b.txt", "sub/big.bin", "mnt/copy/a.txt"};
        for (size_t i = 0; i < ARRAY_SIZE(rels); i++) {
                char a[64], b[64];
                snprintf(a, sizeof(a), "a/%s", rels[i]);
                snprintf(b, sizeof(b), "b/%s", rels[i]);
                assert_int_equal(ino_of(t->s.fd, a), ino_of(t->s.fd, b));
        }
        /* Never a link to the source. */
        assert_true(ino_of(t->s.fd, "b/a.txt") != ino_of(t->s.fd, "ws/a.txt"));
        expect_file_content(t->s.fd, "b/sub/b.txt", "world");
        /* The manifest of the new copy serves the next rebuild, once the
         * first copy is gone. */
        airlock_error e = {0};
        assert_int_equal(fsx_remove_at(t->s.fd, "a", &e), 0);
        fsx_manifest *m3 = NULL;
        assert_int_equal(stage_into(t, "c", "b", m2, &m3, &st, &err), 0);
        assert_int_equal(st.reused, 6);
        fsx_manifest_free(m2);
        fsx_manifest_free(m3);
}

static void test_changed_files_are_copied(void **state)
{
        rt *t = *state;
        /* Content (a new size), a same-size rewrite with the mtime put back
         * (ctime moves), a mode change, a file replaced by another with the
         * same bytes and times (a new inode), a new file. */
        put_file(t->wfd, "a.txt", "hello, world");
        struct stat b0;
        assert_int_equal(fstatat(t->wfd, "sub/b.txt", &b0, 0), 0);
        put_file(t->wfd, "sub/b.txt", "WORLD");
        struct timespec ts[2] = {b0.st_atim, b0.st_mtim};
        assert_int_equal(utimensat(t->wfd, "sub/b.txt", ts, 0), 0);
        assert_int_equal(fchmodat(t->wfd, "sub/big.bin", 0600, 0), 0);
        put_file(t->wfd, "new.txt", "new");
        fsx_stage_stats st = {0};
        airlock_error err = {0};
        assert_int_equal(stage_into(t, "b", "a", t->m, NULL, &st, &err), 0);
        assert_int_equal(st.files, 8);
        assert_int_equal(st.reused, 0);
        expect_file_content(t->s.fd, "b/a.txt", "hello, world");
        expect_file_content(t->s.fd, "b/sub/b.txt", "WORLD");
        expect_file_content(t->s.fd, "b/mnt/copy/sub/b.txt", "WORLD");
        struct stat big;
        assert_int_equal(fstatat(t->s.fd, "b/sub/big.bin", &big, 0), 0);
        assert_int_equal(big.st_mode & 0777, 0600);
        assert_true(big.st_ino != ino_of(t->s.fd, "a/sub/big.bin"));
}

/* A previous copy that is no longer the recorded inode is not trusted. */
static void test_a_tampered_previous_copy_is_not_reused(void **state)
{
        rt *t = *state;
        assert_int_equal(unlinkat(t->s.fd, "a/a.txt", 0), 0);
        put_file(t->s.fd, "a/a.txt", "EVIL!");
        fsx_stage_stats st = {0};
        airlock_error err = {0};
        assert_int_equal(stage_into(t, "b", "a", t->m, NULL, &st, &err), 0);
        assert_int_equal(st.reused, 5);
        expect_file_content(t->s.fd, "b/a.txt", "hello");
}

/* The fail-closed rules of staging hold with reuse: a link in the source
 * fails the whole staging, naming it. */
static void test_a_link_still_fails_closed(void **state)
{
        rt *t = *state;
        assert_int_equal(unlinkat(t->wfd, "sub/b.txt", 0), 0);
        put_link(t->wfd, "sub/b.txt", "/etc/passwd");
        fsx_stage_stats st = {0};
        airlock_error err = {0};
        assert_int_equal(stage_into(t, "b", "a", t->m, NULL, &st, &err), -ELOOP);
        assert_non_null(strstr(err.message, "sub/b.txt"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_unchanged_files_are_links_to_the_previous_copy,
                                            setup, teardown),
            cmocka_unit_test_setup_teardown(test_changed_files_are_copied, setup, teardown),
            cmocka_unit_test_setup_teardown(test_a_tampered_previous_copy_is_not_reused, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_a_link_still_fails_closed, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
