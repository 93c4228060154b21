/* Staging and tree signatures against the hostile corpus: exact outcomes
 * for links anywhere (fail closed), special files (skipped), collisions,
 * caps, hard links, sparse files, metadata; key cases again with the openat2
 * fallback forced on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/fsx_test.h"
#include "common/proc.h"

#include <dirent.h>
#include <sys/mount.h>

static fsx_limits stage_limits(void)
{
        return (fsx_limits){.max_bytes = 1 << 20, .max_files = 1000, .max_depth = 16};
}

/* A fresh, empty destination under s: "dest" (removed first if present). */
static int new_dest(scratch *s)
{
        airlock_error err = {0};
        assert_int_equal(fsx_remove_at(s->fd, "dest", &err), 0);
        put_dir(s->fd, "dest");
        return open_dir(s->fd, "dest");
}

static int stage(scratch *s, const fsx_source *src, size_t n, const fsx_limits *lim,
                 fsx_stage_stats *stats, airlock_error *err)
{
        int dest = new_dest(s);
        int r = fsx_stage(dest, src, n, lim, (uid_t)-1, (gid_t)-1, stats, err);
        close(dest);
        return r;
}

static void expect_file(int dfd, const char *rel, const char *want)
{
        char *got = get_file(dfd, rel);
        if (!got)
                fail_msg("%s missing", rel);
        assert_string_equal(got, want);
        free(got);
}

static void expect_absent(int dfd, const char *rel)
{
        if (faccessat(dfd, rel, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                fail_msg("%s should not exist", rel);
}

static void test_stage_basic(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "ws");
        put_file(s.fd, "ws/b.txt", "bee");
        put_file(s.fd, "ws/a.txt", "ay");
        put_dir(s.fd, "ws/sub");
        put_file(s.fd, "ws/sub/x", "ex");
        put_dir(s.fd, "ws/sub/empty");
        assert_int_equal(fchmodat(s.fd, "ws/a.txt", 0400, 0), 0);
        assert_int_equal(fchmodat(s.fd, "ws/b.txt", 0000, 0), 0);
        assert_int_equal(fchmodat(s.fd, "ws/sub/x", 04755, 0), 0);
        assert_int_equal(linkat(s.fd, "ws/a.txt", s.fd, "ws/sub/hard", 0), 0);
        struct timespec ts[2] = {{.tv_sec = 1000000000, .tv_nsec = 123456789},
                                 {.tv_sec = 1100000000, .tv_nsec = 987654321}};
        assert_int_equal(utimensat(s.fd, "ws/sub/x", ts, AT_SYMLINK_NOFOLLOW), 0);
        assert_int_equal(utimensat(s.fd, "ws/sub", ts, AT_SYMLINK_NOFOLLOW), 0);
        put_file(s.fd, "single.csv", "1,2\n");
        put_dir(s.fd, "m");
        put_file(s.fd, "m/inner", "in");

        char ws[128], single[128], m[128];
        snprintf(ws, sizeof(ws), "%s/ws/", s.path);
        snprintf(single, sizeof(single), "%s/single.csv", s.path);
        snprintf(m, sizeof(m), "%s/m", s.path);
        fsx_source src[] = {
            {.host_path = single, .dest = "data/x.csv"},
            {.host_path = ws, .dest = NULL},
            {.host_path = m, .dest = "/input/more"},
        };
        fsx_limits lim = stage_limits();
        fsx_stage_stats st = {0};
        airlock_error err = {0};
        int r = stage(&s, src, ARRAY_SIZE(src), &lim, &st, &err);
        if (r < 0)
                fail_msg("stage: %s", err.message);
        int d = open_dir(s.fd, "dest");
        struct stat sb;
        assert_int_equal(fstatat(d, "a.txt", &sb, AT_SYMLINK_NOFOLLOW), 0);
        assert_int_equal(sb.st_mode & 07777, 0400);
        assert_int_equal(fstatat(d, "b.txt", &sb, AT_SYMLINK_NOFOLLOW), 0);
        assert_int_equal(sb.st_mode & 07777, 0400); /* u+r added */
        assert_int_equal(fstatat(d, "sub/x", &sb, AT_SYMLINK_NOFOLLOW), 0);
        assert_int_equal(sb.st_mode & 07777, 0755); /* set-id bits dropped */
        assert_int_equal(sb.st_mtim.tv_sec, 1100000000);
        assert_int_equal(sb.st_mtim.tv_nsec, 987654321);
        assert_int_equal(sb.st_atim.tv_sec, 1000000000);
        assert_int_equal(fstatat(d, "sub", &sb, AT_SYMLINK_NOFOLLOW), 0);
        assert_int_equal(sb.st_mtim.tv_sec, 1100000000); /* set after its children */
        expect_file(d, "a.txt", "ay");
        expect_file(d, "b.txt", "bee");
        expect_file(d, "sub/x", "ex");
        expect_file(d, "sub/hard", "ay");
        expect_file(d, "data/x.csv", "1,2\n");
        expect_file(d, "more/inner", "in");
        assert_int_equal(st.files, 6);
        assert_int_equal(st.dirs, 3); /* sub, sub/empty, more */
        assert_int_equal(st.bytes, 2 + 3 + 2 + 2 + 4 + 2);
        assert_int_equal(st.skipped, 0);

        /* Hard links become independent copies. */
        struct stat h1, h2;
        assert_int_equal(fstatat(d, "a.txt", &h1, 0), 0);
        assert_int_equal(fstatat(d, "sub/hard", &h2, 0), 0);
        assert_true(h1.st_ino != h2.st_ino);
        close(d);
        scratch_free(&s);
}

/* Any link anywhere fails the whole staging, naming it. */
static void test_stage_links_fail_closed(void **state)
{
        static const struct {
                const char *link, *target, *where;
        } cases[] = {
            {"ws/final", "a.txt", "ws/final"},
            {"ws/sub/deeper/inner", "../../a.txt", "ws/sub/deeper/inner"},
            {"ws/dirlink", "sub", "ws/dirlink"},
            {"ws/outside", "../secret", "ws/outside"},
            {"ws/dangling", "nowhere", "ws/dangling"},
            {"ws/loop", "loop", "ws/loop"},
            {"ws/abs", "/etc/passwd", "ws/abs"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                scratch s;
                scratch_new(&s);
                put_dir(s.fd, "secret");
                put_file(s.fd, "secret/key", "SECRET");
                put_dir(s.fd, "ws");
                put_file(s.fd, "ws/a.txt", "a");
                put_dir(s.fd, "ws/sub");
                put_dir(s.fd, "ws/sub/deeper");
                put_link(s.fd, cases[i].link, cases[i].target);
                char ws[128], want[160];
                snprintf(ws, sizeof(ws), "%s/ws", s.path);
                snprintf(want, sizeof(want), "%s/%s", s.path, cases[i].where);
                fsx_source src[] = {{.host_path = ws}};
                fsx_limits lim = stage_limits();
                airlock_error err = {0};
                fsx_stage_stats st = {.files = 99};
                assert_int_equal(stage(&s, src, 1, &lim, &st, &err), -ELOOP);
                assert_int_equal(st.files, 99); /* untouched on failure */
                assert_string_equal(err.path, want);
                assert_non_null(strstr(err.message, "symlink"));
                assert_non_null(strstr(err.message, want));
                /* The same for a signature. */
                char hex[FSX_SIGNATURE_HEX];
                assert_int_equal(fsx_tree_signature(ws, &lim, 4096, hex, &err), -ELOOP);
                assert_string_equal(err.path, want);
                /* And the secret was never copied. */
                int d = open_dir(s.fd, "dest");
                expect_absent(d, "outside/key");
                close(d);
                scratch_free(&s);
        }

        /* A mount whose host path is itself a link. */
        scratch s;
        scratch_new(&s);
        put_file(s.fd, "real", "r");
        put_link(s.fd, "alias", "real");
        char alias[128];
        snprintf(alias, sizeof(alias), "%s/alias", s.path);
        fsx_source src[] = {{.host_path = alias, .dest = "x"}};
        fsx_limits lim = stage_limits();
        airlock_error err = {0};
        assert_int_equal(stage(&s, src, 1, &lim, NULL, &err), -ELOOP);
        assert_string_equal(err.path, alias);
        scratch_free(&s);
}

static void test_stage_special_files_skipped(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "ws");
        put_file(s.fd, "ws/a", "a");
        put_fifo(s.fd, "ws/fifo"); /* no writer: opening it blocking would hang */
        put_socket(s.path, "ws/sock");
        put_dir(s.fd, "ws/d");
        put_fifo(s.fd, "ws/d/fifo2");
        char ws[128];
        snprintf(ws, sizeof(ws), "%s/ws", s.path);
        fsx_source src[] = {{.host_path = ws}};
        fsx_limits lim = stage_limits();
        fsx_stage_stats st;
        airlock_error err = {0};
        assert_int_equal(stage(&s, src, 1, &lim, &st, &err), 0);
        assert_int_equal(st.files, 1);
        assert_int_equal(st.dirs, 1);
        assert_int_equal(st.skipped, 3);
        int d = open_dir(s.fd, "dest");
        expect_file(d, "a", "a");
        expect_absent(d, "fifo");
        expect_absent(d, "sock");
        expect_absent(d, "d/fifo2");
        close(d);

        /* A FIFO as a mount is an error, not a hang. */
        char fifo[128];
        snprintf(fifo, sizeof(fifo), "%s/ws/fifo", s.path);
        fsx_source m[] = {{.host_path = fifo, .dest = "f"}};
        assert_int_equal(stage(&s, m, 1, &lim, NULL, &err), -EINVAL);
        assert_non_null(strstr(err.message, "neither a regular file nor a directory"));
        scratch_free(&s);
}

static void test_stage_collisions(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "ws");
        put_file(s.fd, "ws/a.txt", "workspace");
        put_dir(s.fd, "ws/sub");
        put_file(s.fd, "m.txt", "mount");
        put_dir(s.fd, "md");
        put_file(s.fd, "md/a.txt", "mount dir");
        char ws[128], mf[128], md[128];
        snprintf(ws, sizeof(ws), "%s/ws", s.path);
        snprintf(mf, sizeof(mf), "%s/m.txt", s.path);
        snprintf(md, sizeof(md), "%s/md", s.path);
        fsx_limits lim = stage_limits();
        airlock_error err = {0};

        /* A file mount onto a workspace file. */
        fsx_source a[] = {{.host_path = ws}, {.host_path = mf, .dest = "a.txt"}};
        assert_int_equal(stage(&s, a, 2, &lim, NULL, &err), -EEXIST);
        assert_non_null(strstr(err.message, "collision"));
        /* The message names the /input path the two share, not only the
         * host path. */
        assert_non_null(strstr(err.message, "would overwrite /input/a.txt,"));
        int d = open_dir(s.fd, "dest");
        expect_file(d, "a.txt", "workspace");
        close(d);

        /* A mount that needs a directory where a file is. */
        fsx_source b[] = {{.host_path = ws}, {.host_path = mf, .dest = "a.txt/x"}};
        assert_int_equal(stage(&s, b, 2, &lim, NULL, &err), -ENOTDIR);
        assert_non_null(strstr(err.message, "needs a directory at /input/a.txt"));

        /* A directory mount onto a workspace directory. */
        fsx_source c[] = {{.host_path = ws}, {.host_path = md, .dest = "sub"}};
        assert_int_equal(stage(&s, c, 2, &lim, NULL, &err), -EEXIST);
        assert_non_null(strstr(err.message, "collision"));
        assert_non_null(strstr(err.message, "/input/sub,"));

        /* A file mount inside a directory mount, onto one of its files. */
        fsx_source nested[] = {{.host_path = md, .dest = "d"},
                               {.host_path = mf, .dest = "d/a.txt"}};
        assert_int_equal(stage(&s, nested, 2, &lim, NULL, &err), -EEXIST);
        assert_non_null(strstr(err.message, "would overwrite /input/d/a.txt,"));

        /* Two mounts at one place; and a mount into an existing directory,
         * which is allowed. */
        fsx_source e[] = {{.host_path = mf, .dest = "x"}, {.host_path = mf, .dest = "x"}};
        assert_int_equal(stage(&s, e, 2, &lim, NULL, &err), -EEXIST);
        fsx_source f[] = {{.host_path = ws}, {.host_path = mf, .dest = "sub/m.txt"}};
        assert_int_equal(stage(&s, f, 2, &lim, NULL, &err), 0);
        d = open_dir(s.fd, "dest");
        expect_file(d, "sub/m.txt", "mount");
        close(d);

        /* A workspace that is a file. */
        fsx_source g[] = {{.host_path = mf}};
        assert_int_equal(stage(&s, g, 1, &lim, NULL, &err), -ENOTDIR);
        scratch_free(&s);
}

static void test_stage_caps(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "ws");
        for (int i = 0; i < 10; i++) {
                char name[32];
                snprintf(name, sizeof(name), "ws/f%d", i);
                put_bytes(s.fd, name, 100, 'x');
        }
        put_dir(s.fd, "ws/d1");
        put_dir(s.fd, "ws/d1/d2");
        put_dir(s.fd, "ws/d1/d2/d3");
        char ws[128];
        snprintf(ws, sizeof(ws), "%s/ws", s.path);
        fsx_source src[] = {{.host_path = ws}};
        airlock_error err = {0};
        char hex[FSX_SIGNATURE_HEX];

        fsx_limits lim = stage_limits();
        assert_int_equal(stage(&s, src, 1, &lim, NULL, &err), 0);
        assert_int_equal(fsx_tree_signature(ws, &lim, 0, hex, &err), 0);

        lim.max_files = 12; /* 13 entries */
        assert_int_equal(stage(&s, src, 1, &lim, NULL, &err), -E2BIG);
        assert_non_null(strstr(err.message, "too many files: more than 12 entries"));
        assert_int_equal(fsx_tree_signature(ws, &lim, 0, hex, &err), -E2BIG);
        lim.max_files = 13;
        assert_int_equal(stage(&s, src, 1, &lim, NULL, &err), 0);

        lim = stage_limits();
        lim.max_bytes = 999;
        assert_int_equal(stage(&s, src, 1, &lim, NULL, &err), -EFBIG);
        assert_non_null(strstr(err.message, "too large"));
        assert_non_null(strstr(err.message, "999 bytes"));
        assert_int_equal(fsx_tree_signature(ws, &lim, 0, hex, &err), -EFBIG);
        lim.max_bytes = 1000;
        assert_int_equal(stage(&s, src, 1, &lim, NULL, &err), 0);

        lim = stage_limits();
        lim.max_depth = 2;
        assert_int_equal(stage(&s, src, 1, &lim, NULL, &err), -ENAMETOOLONG);
        assert_non_null(strstr(err.message, "too deep"));
        char want[160];
        snprintf(want, sizeof(want), "%s/d1/d2/d3", ws);
        assert_string_equal(err.path, want);
        assert_int_equal(fsx_tree_signature(ws, &lim, 0, hex, &err), -ENAMETOOLONG);
        lim.max_depth = 3;
        assert_int_equal(stage(&s, src, 1, &lim, NULL, &err), 0);
        scratch_free(&s);
}

/* A mount point inside the tree is not crossed; it counts as skipped. */
static void test_stage_mount_point(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "ws");
        put_file(s.fd, "ws/a", "a");
        put_dir(s.fd, "ws/mnt");
        char mp[128], ws[128];
        snprintf(ws, sizeof(ws), "%s/ws", s.path);
        snprintf(mp, sizeof(mp), "%s/ws/mnt", s.path);
        if (mount("none", mp, "tmpfs", 0, "size=64k") < 0) {
                scratch_free(&s);
                skip();
        }
        put_file(s.fd, "ws/mnt/other-fs", "o");
        fsx_source src[] = {{.host_path = ws}};
        fsx_limits lim = stage_limits();
        fsx_stage_stats st;
        airlock_error err = {0};
        int r = stage(&s, src, 1, &lim, &st, &err);
        umount(mp);
        assert_int_equal(r, 0);
        assert_int_equal(st.files, 1);
        assert_int_equal(st.skipped, 1);
        int d = open_dir(s.fd, "dest");
        expect_absent(d, "mnt");
        close(d);
        scratch_free(&s);
}

/* Owner and group of every created entry, when asked. */
static void test_stage_owner(void **state)
{
        if (geteuid() != 0)
                skip();
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "ws");
        put_dir(s.fd, "ws/d");
        put_file(s.fd, "ws/d/f", "f");
        put_file(s.fd, "m", "m");
        char ws[128], m[128];
        snprintf(ws, sizeof(ws), "%s/ws", s.path);
        snprintf(m, sizeof(m), "%s/m", s.path);
        fsx_source src[] = {{.host_path = ws}, {.host_path = m, .dest = "new/dir/m"}};
        fsx_limits lim = stage_limits();
        airlock_error err = {0};
        int dest = new_dest(&s);
        assert_int_equal(fsx_stage(dest, src, 2, &lim, 12345, 23456, NULL, &err), 0);
        const char *names[] = {"d", "d/f", "new", "new/dir", "new/dir/m"};
        for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
                struct stat sb;
                assert_int_equal(fstatat(dest, names[i], &sb, AT_SYMLINK_NOFOLLOW), 0);
                assert_int_equal(sb.st_uid, 12345);
                assert_int_equal(sb.st_gid, 23456);
        }
        close(dest);
        scratch_free(&s);
}

/* Holes stay holes; a file over the cap is refused by its size alone. */
static void test_stage_sparse(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "ws");
        int fd = openat(s.fd, "ws/sparse", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        uint64_t size = 5ull << 30;
        assert_int_equal(ftruncate(fd, (off_t)size), 0);
        assert_int_equal(pwrite(fd, "head", 4, 0), 4);
        assert_int_equal(pwrite(fd, "middle", 6, (off_t)(size / 2)), 6);
        assert_int_equal(pwrite(fd, "tail", 4, (off_t)size - 4), 4);
        close(fd);
        char ws[128];
        snprintf(ws, sizeof(ws), "%s/ws", s.path);
        fsx_source src[] = {{.host_path = ws}};
        airlock_error err = {0};

        fsx_limits lim = stage_limits();
        lim.max_bytes = 1ull << 30;
        assert_int_equal(stage(&s, src, 1, &lim, NULL, &err), -EFBIG);
        assert_non_null(strstr(err.message, "5368709120 bytes"));

        lim.max_bytes = 6ull << 30;
        fsx_stage_stats st;
        assert_int_equal(stage(&s, src, 1, &lim, &st, &err), 0);
        assert_int_equal(st.bytes, size);
        int d = open_dir(s.fd, "dest");
        struct stat sb;
        assert_int_equal(fstatat(d, "sparse", &sb, 0), 0);
        assert_int_equal((uint64_t)sb.st_size, size);
        assert_true((uint64_t)sb.st_blocks * 512 < (16u << 20));
        fd = openat(d, "sparse", O_RDONLY | O_CLOEXEC);
        char buf[8] = {0};
        assert_int_equal(pread(fd, buf, 6, (off_t)(size / 2)), 6);
        assert_memory_equal(buf, "middle", 6);
        assert_int_equal(pread(fd, buf, 4, (off_t)size - 4), 4);
        assert_memory_equal(buf, "tail", 4);
        assert_int_equal(pread(fd, buf, 4, 4096), 4);
        assert_memory_equal(buf, "\0\0\0\0", 4);
        close(fd);
        close(d);
        scratch_free(&s);
}

/* ---- signatures ---------------------------------------------------------- */

static void sig(const char *path, uint64_t threshold, char hex[FSX_SIGNATURE_HEX])
{
        fsx_limits lim = stage_limits();
        airlock_error err = {0};
        int r = fsx_tree_signature(path, &lim, threshold, hex, &err);
        if (r < 0)
                fail_msg("signature of %s: %s", path, err.message);
        assert_int_equal(strlen(hex), 32);
}

static void test_signature(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "ws");
        put_file(s.fd, "ws/a", "aaaa");
        put_dir(s.fd, "ws/d");
        put_file(s.fd, "ws/d/b", "bbbb");
        char ws[128], fa[128];
        snprintf(ws, sizeof(ws), "%s/ws", s.path);
        snprintf(fa, sizeof(fa), "%s/ws/a", s.path);
        char h1[FSX_SIGNATURE_HEX], h2[FSX_SIGNATURE_HEX], m1[FSX_SIGNATURE_HEX],
            m2[FSX_SIGNATURE_HEX], f1[FSX_SIGNATURE_HEX], f2[FSX_SIGNATURE_HEX];
        sig(ws, 4096, h1);
        sig(ws, 4096, h2);
        assert_string_equal(h1, h2);
        sig(ws, 0, m1);
        sig(fa, 4096, f1);

        /* A same-size edit within one mtime tick: restore the times. */
        struct stat before;
        assert_int_equal(fstatat(s.fd, "ws/d/b", &before, 0), 0);
        put_file(s.fd, "ws/d/b", "BBBB");
        struct timespec ts[2] = {before.st_atim, before.st_mtim};
        assert_int_equal(utimensat(s.fd, "ws/d/b", ts, 0), 0);
        sig(ws, 4096, h2);
        assert_string_not_equal(h1, h2);
        /* Metadata alone (threshold 0) cannot see it: why content counts. */
        sig(ws, 0, m2);
        assert_string_equal(m1, m2);

        /* Adding, renaming, chmod, a file mount's content. */
        sig(ws, 4096, h1);
        put_file(s.fd, "ws/new", "");
        sig(ws, 4096, h2);
        assert_string_not_equal(h1, h2);
        assert_int_equal(renameat(s.fd, "ws/new", s.fd, "ws/new2"), 0);
        sig(ws, 4096, h1);
        assert_string_not_equal(h1, h2);
        struct stat ns;
        assert_int_equal(fstatat(s.fd, "ws/new2", &ns, 0), 0);
        assert_int_equal(fchmodat(s.fd, "ws/new2", (ns.st_mode & 0777) ^ 0004, 0), 0);
        sig(ws, 4096, h2);
        assert_string_not_equal(h1, h2);
        assert_int_equal(fstatat(s.fd, "ws/a", &before, 0), 0);
        put_file(s.fd, "ws/a", "AAAA");
        ts[0] = before.st_atim;
        ts[1] = before.st_mtim;
        assert_int_equal(utimensat(s.fd, "ws/a", ts, 0), 0);
        sig(fa, 4096, f2);
        assert_string_not_equal(f1, f2);

        /* A FIFO is skipped as in staging: no hang, no error (its parent's
         * mtime changed, and that is in the signature). */
        put_fifo(s.fd, "ws/fifo");
        sig(ws, 4096, h2);
        assert_string_not_equal(h1, h2);

        /* The hash itself: stable known answer and lane independence. */
        fsx_hash h;
        char hex[33], hex2[33];
        fsx_hash_init(&h);
        fsx_hash_final(&h, hex);
        fsx_hash_init(&h);
        fsx_hash_update(&h, "", 0);
        fsx_hash_final(&h, hex2);
        assert_string_not_equal(hex, hex2);
        assert_string_not_equal(hex, "00000000000000000000000000000000");
        assert_memory_not_equal(hex, hex + 16, 16);
        scratch_free(&s);
}

/* A tree 10,000 levels deep is an error at the cap, never a crash. */
static void test_stage_deep(void **state)
{
        scratch s;
        scratch_new_fast(&s, 256u << 20);
        put_dir(s.fd, "ws");
        int ws_fd = open_dir(s.fd, "ws");
        put_deep(ws_fd, 10000, "leaf");
        close(ws_fd);
        char ws[128];
        snprintf(ws, sizeof(ws), "%s/ws", s.path);
        fsx_source src[] = {{.host_path = ws}};
        fsx_limits lim = stage_limits();
        lim.max_depth = 256;
        lim.max_files = 100000;
        airlock_error err = {0};
        assert_int_equal(stage(&s, src, 1, &lim, NULL, &err), -ENAMETOOLONG);
        assert_non_null(strstr(err.message, "too deep"));
        assert_non_null(strstr(err.message, "256"));
        char hex[FSX_SIGNATURE_HEX];
        assert_int_equal(fsx_tree_signature(ws, &lim, 0, hex, &err), -ENAMETOOLONG);
        /* A depth cap this process cannot hold fds for fails cleanly too. */
        lim.max_depth = 1u << 30;
        int r = stage(&s, src, 1, &lim, NULL, &err);
        assert_true(r == -EMFILE || r == 0);
        scratch_free(&s);
}

/* Errors name paths from untrusted trees; they must stay valid UTF-8 (they
 * end up in JSON), even when the name is not and the path is cut short. */
static void test_error_utf8(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "ws");
        put_link(s.fd, "ws/bad\xff\xfename", "x");
        char ws[128];
        snprintf(ws, sizeof(ws), "%s/ws", s.path);
        fsx_source src[] = {{.host_path = ws}};
        fsx_limits lim = stage_limits();
        airlock_error err = {0};
        assert_int_equal(stage(&s, src, 1, &lim, NULL, &err), -ELOOP);
        assert_true(al_utf8_valid(err.message, strlen(err.message)));
        assert_true(al_utf8_valid(err.path, strlen(err.path)));
        assert_non_null(strstr(err.path, "/ws/bad\xef\xbf\xbd\xef\xbf\xbdname"));
        char hex[FSX_SIGNATURE_HEX];
        assert_int_equal(fsx_tree_signature(ws, &lim, 0, hex, &err), -ELOOP);
        assert_true(al_utf8_valid(err.message, strlen(err.message)));

        /* A message cut inside a multi-byte sequence loses the whole one. */
        airlock_error e = {0};
        memset(e.message, 'a', sizeof(e.message));
        memcpy(e.message + sizeof(e.message) - 3, "\xc3\xa9", 2);
        e.message[sizeof(e.message) - 1] = '\0';
        memcpy(e.message + sizeof(e.message) - 4, "\xff", 1);
        assert_int_equal(fsx_error_utf8(&e, -EINVAL), -EINVAL);
        assert_true(al_utf8_valid(e.message, strlen(e.message)));
        scratch_free(&s);
}

/* From one file system to another, copy_file_range answers EXDEV and the
 * read/write fallback copies: same bytes, holes included. */
static void test_stage_cross_fs(void **state)
{
        struct stat a, b;
        if (stat("/dev/shm", &a) < 0 || stat("/tmp", &b) < 0 || a.st_dev == b.st_dev)
                skip();
        scratch src, dst;
        scratch_new_in(&src, "/dev/shm");
        scratch_new(&dst);
        put_dir(src.fd, "ws");
        put_file(src.fd, "ws/small", "small file");
        int fd = openat(src.fd, "ws/sparse", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, "start", 5, 0), 5);
        assert_int_equal(pwrite(fd, "end", 3, (8 << 20) - 3), 3);
        close(fd);
        char ws[128];
        snprintf(ws, sizeof(ws), "%s/ws", src.path);
        fsx_source srcs[] = {{.host_path = ws}};
        fsx_limits lim = stage_limits();
        lim.max_bytes = 64 << 20;
        fsx_stage_stats st;
        airlock_error err = {0};
        int r = stage(&dst, srcs, 1, &lim, &st, &err);
        if (r < 0)
                fail_msg("stage: %s", err.message);
        int d = open_dir(dst.fd, "dest");
        expect_file(d, "small", "small file");
        struct stat sb;
        assert_int_equal(fstatat(d, "sparse", &sb, 0), 0);
        assert_int_equal(sb.st_size, 8 << 20);
        assert_true((uint64_t)sb.st_blocks * 512 < (1u << 20));
        fd = openat(d, "sparse", O_RDONLY | O_CLOEXEC);
        char buf[8];
        assert_int_equal(pread(fd, buf, 5, 0), 5);
        assert_memory_equal(buf, "start", 5);
        assert_int_equal(pread(fd, buf, 3, (8 << 20) - 3), 3);
        assert_memory_equal(buf, "end", 3);
        close(fd);
        close(d);
        scratch_free(&dst);
        scratch_free(&src);
}

/* Every path out of staging, signatures, capture and clearing, failing or
 * not, closes what it opened: a long-running server must not leak fds. */
static void test_no_fd_leaks(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "ws");
        put_dir(s.fd, "ws/a");
        put_dir(s.fd, "ws/a/b");
        put_file(s.fd, "ws/a/b/f", "f");
        put_fifo(s.fd, "ws/a/fifo");
        put_file(s.fd, "m", "m");
        char ws[128], m[128];
        snprintf(ws, sizeof(ws), "%s/ws", s.path);
        snprintf(m, sizeof(m), "%s/m", s.path);
        int before = count_fds();
        fsx_limits lim = stage_limits();
        airlock_error err = {0};
        char hex[FSX_SIGNATURE_HEX];
        fsx_source ok[] = {{.host_path = ws}, {.host_path = m, .dest = "x/y"}};
        fsx_source clash[] = {{.host_path = ws}, {.host_path = m, .dest = "a/b/f"}};
        assert_int_equal(stage(&s, ok, 2, &lim, NULL, &err), 0);
        assert_int_equal(stage(&s, clash, 2, &lim, NULL, &err), -EEXIST);
        lim.max_depth = 1;
        assert_int_equal(stage(&s, ok, 2, &lim, NULL, &err), -ENAMETOOLONG);
        assert_int_equal(fsx_tree_signature(ws, &lim, 4096, hex, &err), -ENAMETOOLONG);
        lim = stage_limits();
        put_link(s.fd, "ws/a/b/link", "f");
        assert_int_equal(stage(&s, ok, 2, &lim, NULL, &err), -ELOOP);
        assert_int_equal(fsx_tree_signature(ws, &lim, 4096, hex, &err), -ELOOP);
        int wsfd = open_dir(s.fd, "ws");
        airlock_file *f = NULL;
        airlock_refusal *rf = NULL;
        size_t nf = 0, nr = 0;
        assert_int_equal(fsx_capture(wsfd, &lim, &f, &nf, &rf, &nr, &err), 0);
        assert_int_equal(nf, 1);
        assert_int_equal(nr, 2);
        fsx_files_free(f, nf);
        fsx_refused_free(rf, nr);
        assert_int_equal(fsx_clear_dir(wsfd, &err), 0);
        close(wsfd);
        assert_int_equal(fsx_remove_at(s.fd, "dest", &err), 0);
        assert_int_equal(count_fds(), before);
        scratch_free(&s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_stage_basic),
            cmocka_unit_test(test_stage_links_fail_closed),
            cmocka_unit_test(test_stage_special_files_skipped),
            cmocka_unit_test(test_stage_collisions),
            cmocka_unit_test(test_stage_caps),
            cmocka_unit_test(test_stage_mount_point),
            cmocka_unit_test(test_stage_owner),
            cmocka_unit_test(test_stage_sparse),
            cmocka_unit_test(test_signature),
            cmocka_unit_test(test_stage_deep),
            cmocka_unit_test(test_stage_cross_fs),
            cmocka_unit_test(test_no_fd_leaks),
            cmocka_unit_test(test_error_utf8),
            cmocka_unit_test_setup_teardown(test_stage_basic, setup_fallback, teardown_fallback),
            cmocka_unit_test_setup_teardown(test_stage_links_fail_closed, setup_fallback,
                                            teardown_fallback),
            cmocka_unit_test_setup_teardown(test_stage_special_files_skipped, setup_fallback,
                                            teardown_fallback),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
