/* The slow cases of the file transfer core: 100,000 files through staging,
 * signatures, capture and clearing, with the exact cap outcomes. Kept apart
 * so the fast suites stay fast; a few seconds on an idle machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/fsx_test.h"

#include <sys/statvfs.h>

#define DIRS    100
#define PER_DIR 1000
#define ENTRIES (DIRS + DIRS * PER_DIR)

/* s/ws/dNNN/fNNNN, each file "x". */
static void build_100k(scratch *s)
{
        put_dir(s->fd, "ws");
        int ws = open_dir(s->fd, "ws");
        for (int i = 0; i < DIRS; i++) {
                char name[32];
                snprintf(name, sizeof(name), "d%03d", i);
                put_dir(ws, name);
                int d = open_dir(ws, name);
                for (int k = 0; k < PER_DIR; k++) {
                        snprintf(name, sizeof(name), "f%04d", k);
                        int fd = openat(d, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                        assert_true(fd >= 0);
                        assert_int_equal(write(fd, "x", 1), 1);
                        close(fd);
                }
                close(d);
        }
        close(ws);
}

static void test_100k_files(void **state)
{
        scratch s;
        /* 200,000 small files on tmpfs take about 800 MiB (a page each). */
        struct statvfs vfs;
        bool shm = statvfs("/dev/shm", &vfs) == 0 &&
                   (uint64_t)vfs.f_bavail * vfs.f_frsize > (1ull << 30) &&
                   vfs.f_favail > 2 * ENTRIES + 1000;
        scratch_new_in(&s, shm ? "/dev/shm" : "/tmp");
        build_100k(&s);
        char ws[128];
        snprintf(ws, sizeof(ws), "%s/ws", s.path);
        fsx_source src[] = {{.host_path = ws}};
        airlock_error err = {0};

        /* Staging: exactly at the entry cap, then one over it. */
        fsx_limits lim = {.max_bytes = 1 << 30, .max_files = ENTRIES, .max_depth = 4};
        put_dir(s.fd, "dest");
        int dest = open_dir(s.fd, "dest");
        fsx_stage_stats st;
        int r = fsx_stage(dest, src, 1, &lim, (uid_t)-1, (gid_t)-1, &st, &err);
        if (r < 0)
                fail_msg("stage: %s", err.message);
        assert_int_equal(st.files, DIRS * PER_DIR);
        assert_int_equal(st.dirs, DIRS);
        assert_int_equal(st.bytes, DIRS * PER_DIR);
        char *last = get_file(dest, "d099/f0999");
        assert_non_null(last);
        assert_string_equal(last, "x");
        free(last);

        char h1[FSX_SIGNATURE_HEX], h2[FSX_SIGNATURE_HEX];
        assert_int_equal(fsx_tree_signature(ws, &lim, 4096, h1, &err), 0);
        assert_int_equal(fsx_tree_signature(ws, &lim, 4096, h2, &err), 0);
        assert_string_equal(h1, h2);

        /* Capture of the staged copy with the default-like caps: the first
         * 1000 files by path, then refusals, the list capped at 100 + 1.
         * The listing budget (4 * 1000 + 1024 entries) ends in d004; the
         * count is exact: 3 * 1000 files (d001-d003), d004 itself, the 924
         * files listed in it, and the 95 directories d005-d099. */
        fsx_limits cl = {
            .max_bytes = 64 << 20, .max_files = 1000, .max_depth = 64, .max_file = 16 << 20};
        airlock_file *f = NULL;
        airlock_refusal *rf = NULL;
        size_t nf = 0, nr = 0;
        assert_int_equal(fsx_capture(dest, &cl, &f, &nf, &rf, &nr, &err), 0);
        assert_int_equal(nf, 1000);
        assert_string_equal(f[0].path, "/output/d000/f0000");
        assert_string_equal(f[999].path, "/output/d000/f0999");
        assert_int_equal(nr, FSX_REFUSED_MAX + 1);
        assert_string_equal(rf[0].path, "/output/d001/f0000");
        assert_string_equal(rf[0].reason, "too many files");
        assert_string_equal(rf[100].reason, "3920 more refused (list capped at 100)");
        fsx_files_free(f, nf);
        fsx_refused_free(rf, nr);

        /* Clearing all of it. */
        assert_int_equal(fsx_clear_dir(dest, &err), 0);
        close(dest);

        /* One entry over the cap (staging itself is checked against the
         * same walker at a small scale in test_fsx_stage). */
        lim.max_files = ENTRIES - 1;
        assert_int_equal(fsx_tree_signature(ws, &lim, 4096, h2, &err), -E2BIG);
        assert_non_null(strstr(err.message, "more than 100099 entries"));
        close(dest);
        scratch_free(&s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_100k_files),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
