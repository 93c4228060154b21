/* Unit tests of the file transfer core against a hostile corpus built in a
 * scratch directory: exact outcomes for links, loops, FIFOs, sockets, hard
 * links, odd names, caps; each key case also runs with the openat2 fallback
 * forced on (the "[fallback]" duplicates at the end of main). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/fsx_test.h"

#include <dirent.h>
#include <sys/sysmacros.h>
#include <grp.h>
#include <pthread.h>
#include <sys/mount.h>
#include <sys/wait.h>

/* ---- mount path normalisation ------------------------------------------ */

static void test_normalize_table(void **state)
{
        static const struct {
                const char *in, *out;
        } ok[] = {
            {"data/x.csv", "data/x.csv"},
            {"/input/data/x.csv", "data/x.csv"},
            {"input/data/x.csv", "data/x.csv"},
            {"  data//x.csv  ", "data/x.csv"},
            {"\\input\\data\\x.csv", "data/x.csv"},
            {"./a/./b/", "a/b"},
            {"/input/input/x", "input/x"},
            {"data/input", "data/input"},
            {"x", "x"},
            {"\t/x/\n", "x"},
            {"./input/y", "y"},
            {"a...b/..c/c..", "a...b/..c/c.."},
        };
        for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
                char *out = NULL;
                airlock_error err = {0};
                int r = fsx_normalize_mount_path(ok[i].in, &out, &err);
                if (r < 0)
                        fail_msg("\"%s\": %s", ok[i].in, err.message);
                assert_string_equal(out, ok[i].out);
                free(out);
        }

        static const struct {
                const char *in, *msg;
        } bad[] = {
            {"", "mount path is empty"},       {"   ", "mount path is empty"},
            {"..", "contains \"..\""},         {"a/../b", "contains \"..\""},
            {"a\\..\\b", "contains \"..\""},   {"/input/..", "contains \"..\""},
            {"/input", "names /input itself"}, {"input/", "names /input itself"},
            {"/", "names /input itself"},      {"./.", "names /input itself"},
        };
        for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
                char *out = (char *)"untouched";
                airlock_error err = {0};
                int r = fsx_normalize_mount_path(bad[i].in, &out, &err);
                assert_int_equal(r, -EINVAL);
                assert_int_equal(err.code, -EINVAL);
                assert_string_equal(out, "untouched");
                if (!strstr(err.message, bad[i].msg))
                        fail_msg("\"%s\": got \"%s\", want \"%s\"", bad[i].in, err.message,
                                 bad[i].msg);
        }
}

/* ---- fsx_open_beneath --------------------------------------------------- */

static void test_open_beneath(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "dir");
        put_dir(s.fd, "dir/sub");
        put_file(s.fd, "dir/sub/f", "x");
        put_link(s.fd, "final", "dir/sub/f");
        put_link(s.fd, "mid", "dir");
        put_link(s.fd, "dangling", "nowhere");
        put_link(s.fd, "loop", "loop");
        put_link(s.fd, "abs", "/etc");

        int fd = fsx_open_beneath(s.fd, "dir/sub/f", O_RDONLY, 0);
        assert_true(fd >= 0);
        char c = 0;
        assert_int_equal(read(fd, &c, 1), 1);
        assert_int_equal(c, 'x');
        close(fd);
        fd = fsx_open_beneath(s.fd, "./dir//sub/./f", O_RDONLY, 0);
        assert_true(fd >= 0);
        close(fd);
        fd = fsx_open_beneath(s.fd, "", O_RDONLY | O_DIRECTORY, 0);
        assert_true(fd >= 0);
        close(fd);

        /* Links anywhere: final, intermediate, dangling, looping, absolute. */
        assert_int_equal(fsx_open_beneath(s.fd, "final", O_RDONLY, 0), -ELOOP);
        assert_int_equal(fsx_open_beneath(s.fd, "final", O_PATH, 0), -ELOOP);
        assert_int_equal(fsx_open_beneath(s.fd, "mid/sub/f", O_RDONLY, 0), -ELOOP);
        assert_int_equal(fsx_open_beneath(s.fd, "mid", O_RDONLY | O_DIRECTORY, 0), -ELOOP);
        assert_int_equal(fsx_open_beneath(s.fd, "dangling", O_RDONLY, 0), -ELOOP);
        assert_int_equal(fsx_open_beneath(s.fd, "loop", O_RDONLY, 0), -ELOOP);
        assert_int_equal(fsx_open_beneath(s.fd, "abs/passwd", O_RDONLY, 0), -ELOOP);
        /* Creating through a link is refused too, and makes nothing. */
        assert_int_equal(fsx_open_beneath(s.fd, "mid/new", O_WRONLY | O_CREAT, 0600), -ELOOP);
        assert_int_equal(faccessat(s.fd, "dir/new", F_OK, 0), -1);
        /* Escapes. */
        assert_int_equal(fsx_open_beneath(s.fd, "/etc/passwd", O_RDONLY, 0), -EXDEV);
        assert_int_equal(fsx_open_beneath(s.fd, "../x", O_RDONLY, 0), -EXDEV);
        assert_int_equal(fsx_open_beneath(s.fd, "dir/../dir/sub/f", O_RDONLY, 0), -EXDEV);
        assert_int_equal(fsx_open_beneath(s.fd, "dir/..", O_RDONLY, 0), -EXDEV);
        /* Plain errors stay themselves. */
        assert_int_equal(fsx_open_beneath(s.fd, "dir/missing", O_RDONLY, 0), -ENOENT);
        assert_int_equal(fsx_open_beneath(s.fd, "dir/sub/f/x", O_RDONLY, 0), -ENOTDIR);
        /* Creating beneath works, with the mode; a mode given without
         * O_CREAT is ignored rather than an error. */
        fd = fsx_open_beneath(s.fd, "dir/sub/new", O_WRONLY | O_CREAT | O_EXCL, 0600);
        assert_true(fd >= 0);
        struct stat st;
        assert_int_equal(fstat(fd, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
        close(fd);
        assert_int_equal(fsx_open_beneath(s.fd, "dir/sub/new", O_WRONLY | O_CREAT | O_EXCL, 0600),
                         -EEXIST);
        fd = fsx_open_beneath(s.fd, "dir", O_RDONLY | O_DIRECTORY, 0755);
        assert_true(fd >= 0);
        close(fd);
        /* O_CLOEXEC is always set. */
        fd = fsx_open_beneath(s.fd, "dir", O_RDONLY | O_DIRECTORY, 0);
        assert_true(fd >= 0);
        assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
        close(fd);
        scratch_free(&s);
}

/* ---- media types --------------------------------------------------------- */

static void test_media_type(void **state)
{
        assert_string_equal(fsx_media_type("a.txt"), "text/plain");
        assert_string_equal(fsx_media_type("/output/x/b.csv"), "text/csv");
        assert_string_equal(fsx_media_type("X.PNG"), "image/png");
        assert_string_equal(fsx_media_type("r.Json"), "application/json");
        assert_string_equal(fsx_media_type("a.tar.gz"), "application/gzip");
        assert_string_equal(fsx_media_type("page.html"), "text/html");
        assert_string_equal(fsx_media_type("noext"), "application/octet-stream");
        assert_string_equal(fsx_media_type(".bashrc"), "application/octet-stream");
        assert_string_equal(fsx_media_type("dir.txt/noext"), "application/octet-stream");
        assert_string_equal(fsx_media_type("trailing."), "application/octet-stream");
        assert_string_equal(fsx_media_type("x.definitely-not-a-type"), "application/octet-stream");
        assert_string_equal(fsx_media_type(""), "application/octet-stream");
        assert_string_equal(fsx_media_type(NULL), "application/octet-stream");
}

static void *lookup_thread(void *arg)
{
        bool ok = true;
        for (int i = 0; i < 1000 && ok; i++)
                ok = strcmp(fsx_media_type("x.csv"), "text/csv") == 0 &&
                     strcmp(fsx_media_type("y.PNG"), "image/png") == 0;
        *(bool *)arg = ok;
        return NULL;
}

/* The table is loaded once, whichever of many threads asks first: run in a
 * fresh child, where nothing has loaded it yet. */
static void test_media_type_threads(void **state)
{
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                pthread_t t[8];
                bool ok[8];
                for (int i = 0; i < 8; i++)
                        if (pthread_create(&t[i], NULL, lookup_thread, &ok[i]) != 0)
                                _exit(2);
                bool all = true;
                for (int i = 0; i < 8; i++) {
                        pthread_join(t[i], NULL);
                        all = all && ok[i];
                }
                _exit(all ? 0 : 1);
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- capture ------------------------------------------------------------- */

typedef struct captured {
        airlock_file *files;
        size_t n_files;
        airlock_refusal *refused;
        size_t n_refused;
} captured;

static int do_capture(int dfd, const fsx_limits *lim, captured *c, airlock_error *err)
{
        memset(c, 0, sizeof(*c));
        return fsx_capture(dfd, lim, &c->files, &c->n_files, &c->refused, &c->n_refused, err);
}

static void captured_free(captured *c)
{
        fsx_files_free(c->files, c->n_files);
        fsx_refused_free(c->refused, c->n_refused);
        memset(c, 0, sizeof(*c));
}

static fsx_limits capture_limits(void)
{
        return (fsx_limits){
            .max_bytes = 1 << 20, .max_files = 100, .max_depth = 8, .max_file = 1000};
}

static void expect_refused(const captured *c, const char *const *want, size_t n)
{
        for (size_t i = 0; i < c->n_refused && i < n; i++) {
                char got[512];
                snprintf(got, sizeof(got), "%s %s", c->refused[i].path, c->refused[i].reason);
                if (strcmp(got, want[i]) != 0)
                        fail_msg("refusal %zu: got \"%s\", want \"%s\"", i, got, want[i]);
        }
        assert_int_equal(c->n_refused, n);
}

static void test_capture_corpus(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "secret");
        put_file(s.fd, "secret/key", "SECRET");
        put_dir(s.fd, "out");
        int out = open_dir(s.fd, "out");
        put_file(out, "a.txt", "hello");
        put_file(out, "b.csv", "x,y\n");
        put_link(out, "link", "a.txt");
        put_link(out, "dangling", "nowhere");
        put_link(out, "loop", "loop");
        put_link(out, "escape", "../secret/key");
        put_link(out, "dirlink", "../secret");
        put_dir(out, "sub");
        put_file(out, "sub/c.json", "{}");
        put_fifo(out, "sub/fifo");
        put_socket(s.path, "out/sock");
        assert_int_equal(linkat(out, "a.txt", out, "hard", 0), 0);
        put_file(out, "bad\xff.txt", "?");
        put_bytes(out, "big.bin", 2000, 'b');
        put_dir(out, "a-dir");
        put_file(out, "a-dir/z", "z");
        put_file(out, "a.", "dot");
        put_dir(out, "empty");

        fsx_limits lim = capture_limits();
        captured c;
        airlock_error err = {0};
        int r = do_capture(out, &lim, &c, &err);
        if (r < 0)
                fail_msg("capture: %s", err.message);

        static const struct {
                const char *path, *type, *data;
        } want[] = {
            {"/output/a-dir/z", "application/octet-stream", "z"},
            {"/output/a.", "application/octet-stream", "dot"},
            {"/output/a.txt", "text/plain", "hello"},
            {"/output/b.csv", "text/csv", "x,y\n"},
            {"/output/hard", "application/octet-stream", "hello"},
            {"/output/sub/c.json", "application/json", "{}"},
        };
        assert_int_equal(c.n_files, ARRAY_SIZE(want));
        for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
                assert_string_equal(c.files[i].path, want[i].path);
                assert_string_equal(c.files[i].media_type, want[i].type);
                assert_int_equal(c.files[i].size, strlen(want[i].data));
                assert_memory_equal(c.files[i].data, want[i].data, strlen(want[i].data));
        }
        static const char *const refused[] = {
            "/output/bad\xef\xbf\xbd.txt name not UTF-8",
            "/output/big.bin too large",
            "/output/dangling symlink",
            "/output/dirlink symlink",
            "/output/escape symlink",
            "/output/link symlink",
            "/output/loop symlink",
            "/output/sock not a regular file",
            "/output/sub/fifo not a regular file",
        };
        expect_refused(&c, refused, ARRAY_SIZE(refused));
        captured_free(&c);

        /* A failing capture leaves the out-params alone. */
        airlock_file *f = (airlock_file *)&err;
        size_t nf = 77;
        airlock_refusal *rf = (airlock_refusal *)&err;
        size_t nr = 78;
        int file_fd = openat(out, "a.txt", O_RDONLY | O_CLOEXEC);
        assert_int_equal(fsx_capture(file_fd, &lim, &f, &nf, &rf, &nr, &err), -ENOTDIR);
        assert_ptr_equal(f, (airlock_file *)&err);
        assert_int_equal(nf, 77);
        assert_int_equal(nr, 78);
        close(file_fd);
        close(out);
        scratch_free(&s);
}

static void test_capture_caps(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "out");
        int out = open_dir(s.fd, "out");
        for (int i = 0; i < 5; i++) {
                char name[16];
                snprintf(name, sizeof(name), "f%d", i);
                put_bytes(out, name, 100, 'x');
        }
        put_dir(out, "d1");
        put_dir(out, "d1/d2");
        put_dir(out, "d1/d2/d3");
        put_file(out, "d1/d2/f", "ok");
        put_file(out, "d1/d2/d3/f", "deep");

        /* Count: the first files by path are taken, the rest refused. */
        fsx_limits lim = capture_limits();
        lim.max_files = 2;
        captured c;
        airlock_error err = {0};
        assert_int_equal(do_capture(out, &lim, &c, &err), 0);
        assert_int_equal(c.n_files, 2);
        assert_string_equal(c.files[0].path, "/output/d1/d2/d3/f");
        assert_string_equal(c.files[1].path, "/output/d1/d2/f");
        static const char *const many[] = {
            "/output/f0 too many files", "/output/f1 too many files", "/output/f2 too many files",
            "/output/f3 too many files", "/output/f4 too many files",
        };
        expect_refused(&c, many, ARRAY_SIZE(many));
        captured_free(&c);

        /* Depth: d3 is at depth 3. */
        lim = capture_limits();
        lim.max_depth = 2;
        assert_int_equal(do_capture(out, &lim, &c, &err), 0);
        assert_int_equal(c.n_files, 6);
        static const char *const deep[] = {"/output/d1/d2/d3 too deep"};
        expect_refused(&c, deep, 1);
        captured_free(&c);

        /* Total bytes: 250 allow two files of 100 (and "ok", 2 bytes). */
        lim = capture_limits();
        lim.max_bytes = 250;
        assert_int_equal(do_capture(out, &lim, &c, &err), 0);
        assert_int_equal(c.n_files, 4);
        assert_string_equal(c.files[0].path, "/output/d1/d2/d3/f");
        assert_string_equal(c.files[1].path, "/output/d1/d2/f");
        assert_string_equal(c.files[2].path, "/output/f0");
        assert_string_equal(c.files[3].path, "/output/f1");
        static const char *const large[] = {"/output/f2 too large", "/output/f3 too large",
                                            "/output/f4 too large"};
        expect_refused(&c, large, ARRAY_SIZE(large));
        captured_free(&c);

        /* Caps at their largest values are "no cap", not an overflow. */
        lim = (fsx_limits){.max_bytes = UINT64_MAX,
                           .max_files = UINT64_MAX,
                           .max_depth = UINT32_MAX,
                           .max_file = UINT64_MAX};
        assert_int_equal(do_capture(out, &lim, &c, &err), 0);
        assert_int_equal(c.n_files, 7);
        assert_int_equal(c.n_refused, 0);
        captured_free(&c);
        put_dir(s.fd, "dest");
        int dest = open_dir(s.fd, "dest");
        char ws[128];
        snprintf(ws, sizeof(ws), "%s/out", s.path);
        fsx_source src[] = {{.host_path = ws}};
        fsx_stage_stats st;
        assert_int_equal(fsx_stage(dest, src, 1, &lim, (uid_t)-1, (gid_t)-1, &st, &err), 0);
        assert_int_equal(st.files, 7);
        close(dest);
        char hex[FSX_SIGNATURE_HEX];
        assert_int_equal(fsx_tree_signature(ws, &lim, UINT64_MAX, hex, &err), 0);

        /* Per file. */
        lim = capture_limits();
        lim.max_file = 99;
        assert_int_equal(do_capture(out, &lim, &c, &err), 0);
        assert_int_equal(c.n_files, 2);
        assert_int_equal(c.n_refused, 5);
        assert_string_equal(c.refused[0].reason, "too large");
        captured_free(&c);
        close(out);
        scratch_free(&s);
}

static void test_capture_refusal_cap(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "out");
        int out = open_dir(s.fd, "out");
        for (int i = 0; i < 150; i++) {
                char name[16];
                snprintf(name, sizeof(name), "l%03d", i);
                put_link(out, name, "/etc/passwd");
        }
        put_file(out, "z.txt", "z");
        fsx_limits lim = capture_limits();
        captured c;
        airlock_error err = {0};
        assert_int_equal(do_capture(out, &lim, &c, &err), 0);
        assert_int_equal(c.n_files, 1);
        assert_int_equal(c.n_refused, FSX_REFUSED_MAX + 1);
        assert_string_equal(c.refused[0].path, "/output/l000");
        assert_string_equal(c.refused[99].path, "/output/l099");
        assert_string_equal(c.refused[100].path, "/output");
        assert_string_equal(c.refused[100].reason, "50 more refused (list capped at 100)");
        captured_free(&c);
        close(out);
        scratch_free(&s);
}

static int hook_dir = -1;

/* Grows grow.txt and big-grow.bin, and shrinks shrink.txt, between the
 * check of each file and the read of its bytes. */
static void change_hook(int fd, const char *path)
{
        const char *name = strrchr(path, '/') + 1;
        if (strcmp(name, "grow.txt") == 0 || strcmp(name, "big-grow.bin") == 0) {
                int w = openat(hook_dir, name, O_WRONLY | O_APPEND | O_CLOEXEC);
                assert_int_equal(write(w, "more", 4), 4);
                close(w);
        } else if (strcmp(name, "shrink.txt") == 0) {
                int w = openat(hook_dir, name, O_WRONLY | O_CLOEXEC);
                assert_int_equal(ftruncate(w, 2), 0);
                close(w);
        }
}

static void test_capture_changed(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "out");
        int out = open_dir(s.fd, "out");
        put_file(out, "grow.txt", "start");
        put_file(out, "shrink.txt", "longer text");
        put_bytes(out, "big-grow.bin", 200000, 'b');
        put_file(out, "calm.txt", "calm");
        hook_dir = out;
        fsx_capture_read_hook = change_hook;
        fsx_limits lim = capture_limits();
        lim.max_file = 0;
        captured c;
        airlock_error err = {0};
        int r = do_capture(out, &lim, &c, &err);
        fsx_capture_read_hook = NULL;
        hook_dir = -1;
        assert_int_equal(r, 0);
        assert_int_equal(c.n_files, 1);
        assert_string_equal(c.files[0].path, "/output/calm.txt");
        static const char *const want[] = {"/output/big-grow.bin changed while reading",
                                           "/output/grow.txt changed while reading",
                                           "/output/shrink.txt changed while reading"};
        expect_refused(&c, want, ARRAY_SIZE(want));
        captured_free(&c);
        close(out);
        scratch_free(&s);
}

/* Names that are not UTF-8: a file is refused with U+FFFD in its path, a
 * directory is refused whole and not entered; staging copies both names
 * byte for byte. */
static void test_bad_utf8_names(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "out");
        int out = open_dir(s.fd, "out");
        put_dir(out, "d\xc3");
        put_file(out, "d\xc3/inside", "i");
        put_file(out, "overlong\xc0\xaf", "o");
        put_file(out, "ok-\xc3\xa9", "e"); /* valid: e-acute */
        fsx_limits lim = capture_limits();
        captured c;
        airlock_error err = {0};
        assert_int_equal(do_capture(out, &lim, &c, &err), 0);
        assert_int_equal(c.n_files, 1);
        assert_string_equal(c.files[0].path, "/output/ok-\xc3\xa9");
        assert_int_equal(c.n_refused, 2);
        assert_string_equal(c.refused[0].reason, "name not UTF-8");
        assert_string_equal(c.refused[1].reason, "name not UTF-8");
        assert_true(al_utf8_valid(c.refused[0].path, strlen(c.refused[0].path)));
        assert_true(al_utf8_valid(c.refused[1].path, strlen(c.refused[1].path)));
        assert_non_null(strstr(c.refused[0].path, "/output/d\xef\xbf\xbd"));
        assert_non_null(strstr(c.refused[1].path, "/output/overlong\xef\xbf\xbd"));
        captured_free(&c);

        char ws[128];
        snprintf(ws, sizeof(ws), "%s/out", s.path);
        fsx_source src[] = {{.host_path = ws}};
        put_dir(s.fd, "dest");
        int dest = open_dir(s.fd, "dest");
        assert_int_equal(fsx_stage(dest, src, 1, &lim, (uid_t)-1, (gid_t)-1, NULL, &err), 0);
        char *got = get_file(dest, "d\xc3/inside");
        assert_non_null(got);
        assert_string_equal(got, "i");
        free(got);
        assert_int_equal(faccessat(dest, "overlong\xc0\xaf", F_OK, AT_SYMLINK_NOFOLLOW), 0);
        close(dest);
        close(out);
        scratch_free(&s);
}

/* Entries the host may not open (a guest can chmod 000 its own files) are
 * refused "unreadable", never a failure of the whole capture. Root reads
 * everything, so as root the capture runs in a child that became nobody. */
static void test_capture_unreadable(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "out");
        int out = open_dir(s.fd, "out");
        put_file(out, "a.txt", "a");
        put_file(out, "closed.txt", "c");
        put_dir(out, "locked");
        put_file(out, "locked/inside", "i");
        assert_int_equal(fchmodat(out, "closed.txt", 0, 0), 0);
        assert_int_equal(fchmodat(out, "locked", 0, 0), 0);
        bool root = geteuid() == 0;
        if (root) {
                const char *names[] = {".", "a.txt", "closed.txt", "locked", "locked/inside"};
                for (size_t i = 0; i < ARRAY_SIZE(names); i++)
                        assert_int_equal(fchownat(out, names[i], 65534, 65534, 0), 0);
                assert_int_equal(fchmod(s.fd, 0755), 0);
        }
        pid_t pid = root ? fork() : 0;
        assert_true(pid >= 0);
        if (pid == 0) {
                if (root && (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
                             setresuid(65534, 65534, 65534) < 0))
                        _exit(3);
                fsx_limits lim = capture_limits();
                captured c;
                airlock_error err = {0};
                int r = do_capture(out, &lim, &c, &err);
                bool ok = r == 0 && c.n_files == 1 &&
                          strcmp(c.files[0].path, "/output/a.txt") == 0 && c.n_refused == 2 &&
                          strcmp(c.refused[0].path, "/output/closed.txt") == 0 &&
                          strcmp(c.refused[0].reason, "unreadable") == 0 &&
                          strcmp(c.refused[1].path, "/output/locked") == 0 &&
                          strcmp(c.refused[1].reason, "unreadable") == 0;
                captured_free(&c);
                /* A root it may not list: one refusal, no failure. */
                if (ok && fchmod(out, 0) == 0) {
                        r = do_capture(out, &lim, &c, &err);
                        ok = r == 0 && c.n_files == 0 && c.n_refused == 1 &&
                             strcmp(c.refused[0].path, "/output") == 0 &&
                             strcmp(c.refused[0].reason, "unreadable") == 0;
                        captured_free(&c);
                        ok = fchmod(out, 0755) == 0 && ok;
                }
                if (root)
                        _exit(ok ? 0 : 1);
                assert_true(ok);
        } else {
                int status = 0;
                assert_int_equal(waitpid(pid, &status, 0), pid);
                assert_true(WIFEXITED(status));
                assert_int_equal(WEXITSTATUS(status), 0);
        }
        assert_int_equal(fchmodat(out, "locked", 0700, 0), 0);
        close(out);
        scratch_free(&s);
}

/* A capture of a tmpfs root, as every copy's /output is, which proves an
 * empty root with its inode count and walks nothing: no entry of any kind
 * may hide from it. Each kind is made alone on a fresh mount, where it is
 * the only inode beside the root; a file unlinked while open holds an
 * inode and no entry. Mounting needs privilege; without it the case is
 * skipped. */
static void test_capture_empty_tmpfs(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "mp");
        char mp[128];
        snprintf(mp, sizeof(mp), "%s/mp", s.path);
        static const char *const kinds[] = {"", "file", "dir", "symlink", "fifo", "unlinked"};
        for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
                if (mount("none", mp, "tmpfs", 0, "size=64k,nr_inodes=16,mode=0755") < 0) {
                        scratch_free(&s);
                        skip();
                }
                int out = open_dir(s.fd, "mp");
                int held = -1;
                if (strcmp(kinds[k], "file") == 0)
                        put_file(out, "f.txt", "f");
                else if (strcmp(kinds[k], "dir") == 0)
                        put_dir(out, "d");
                else if (strcmp(kinds[k], "symlink") == 0)
                        assert_int_equal(symlinkat("f.txt", out, "l"), 0);
                else if (strcmp(kinds[k], "fifo") == 0)
                        put_fifo(out, "p");
                else if (strcmp(kinds[k], "unlinked") == 0) {
                        held = openat(out, "gone", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                        assert_true(held >= 0);
                        assert_int_equal(unlinkat(out, "gone", 0), 0);
                }
                fsx_limits lim = capture_limits();
                captured c;
                airlock_error err = {0};
                assert_int_equal(do_capture(out, &lim, &c, &err), 0);
                if (strcmp(kinds[k], "file") == 0) {
                        assert_int_equal(c.n_files, 1);
                        assert_string_equal(c.files[0].path, "/output/f.txt");
                } else {
                        assert_int_equal(c.n_files, 0);
                }
                static const char *const link[] = {"/output/l symlink"};
                static const char *const fifo[] = {"/output/p not a regular file"};
                if (strcmp(kinds[k], "symlink") == 0)
                        expect_refused(&c, link, 1);
                else if (strcmp(kinds[k], "fifo") == 0)
                        expect_refused(&c, fifo, 1);
                else
                        assert_int_equal(c.n_refused, 0);
                captured_free(&c);
                if (held >= 0)
                        close(held);
                close(out);
                assert_int_equal(umount(mp), 0);
        }
        scratch_free(&s);
}

/* Device nodes (when this process may make them): refused by capture
 * without being opened, skipped by staging, removed by clearing. */
static void test_devices(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "out");
        int out = open_dir(s.fd, "out");
        if (mknodat(out, "null", S_IFCHR | 0666, makedev(1, 3)) < 0 ||
            mknodat(out, "zero", S_IFCHR | 0666, makedev(1, 5)) < 0) {
                close(out);
                scratch_free(&s);
                skip();
        }
        put_file(out, "x", "x");
        fsx_limits lim = capture_limits();
        captured c;
        airlock_error err = {0};
        assert_int_equal(do_capture(out, &lim, &c, &err), 0);
        assert_int_equal(c.n_files, 1);
        static const char *const want[] = {"/output/null not a regular file",
                                           "/output/zero not a regular file"};
        expect_refused(&c, want, ARRAY_SIZE(want));
        captured_free(&c);

        char ws[128];
        snprintf(ws, sizeof(ws), "%s/out", s.path);
        fsx_source src[] = {{.host_path = ws}};
        put_dir(s.fd, "dest");
        int dest = open_dir(s.fd, "dest");
        fsx_stage_stats st;
        assert_int_equal(fsx_stage(dest, src, 1, &lim, (uid_t)-1, (gid_t)-1, &st, &err), 0);
        assert_int_equal(st.files, 1);
        assert_int_equal(st.skipped, 2);
        assert_int_equal(faccessat(dest, "null", F_OK, AT_SYMLINK_NOFOLLOW), -1);
        close(dest);

        assert_int_equal(fsx_clear_dir(out, &err), 0);
        assert_int_equal(faccessat(out, "zero", F_OK, AT_SYMLINK_NOFOLLOW), -1);
        close(out);
        scratch_free(&s);
}

/* A deep tree in /output is refused at the depth cap, never a crash, and
 * clearing takes it away whatever its depth. */
static void test_capture_and_clear_deep(void **state)
{
        scratch s;
        scratch_new_fast(&s, 128u << 20);
        put_dir(s.fd, "out");
        int out = open_dir(s.fd, "out");
        put_deep(out, 10000, "leaf");
        put_file(out, "top.txt", "top");
        fsx_limits lim = capture_limits();
        lim.max_depth = 64;
        captured c;
        airlock_error err = {0};
        assert_int_equal(do_capture(out, &lim, &c, &err), 0);
        assert_int_equal(c.n_files, 1);
        assert_int_equal(c.n_refused, 1);
        assert_string_equal(c.refused[0].reason, "too deep");
        assert_int_equal(strlen(c.refused[0].path), strlen("/output") + 2 * 65);
        captured_free(&c);

        assert_int_equal(fsx_clear_dir(out, &err), 0);
        assert_int_equal(faccessat(out, "d", F_OK, AT_SYMLINK_NOFOLLOW), -1);
        assert_int_equal(faccessat(out, "top.txt", F_OK, AT_SYMLINK_NOFOLLOW), -1);
        assert_int_equal(faccessat(s.fd, "out", F_OK, 0), 0);
        close(out);
        scratch_free(&s);
}

/* ---- clearing ------------------------------------------------------------ */

static void test_clear_corpus(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "keep");
        put_file(s.fd, "keep/target", "target");
        put_dir(s.fd, "c");
        int c = open_dir(s.fd, "c");
        put_link(c, "to-file", "../keep/target");
        put_link(c, "to-dir", "../keep");
        put_link(c, "loop", "loop");
        put_link(c, "dangling", "nowhere");
        put_fifo(c, "fifo");
        put_socket(s.path, "c/sock");
        put_dir(c, "x");
        put_dir(c, "x/y");
        put_file(c, "x/y/z", "z");
        put_fifo(c, "x/y/fifo");
        assert_int_equal(linkat(s.fd, "keep/target", c, "hard", 0), 0);
        put_deep(c, 300, "leaf");

        airlock_error err = {0};
        int r = fsx_clear_dir(c, &err);
        if (r < 0)
                fail_msg("clear: %s", err.message);
        int probe = openat(c, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fdopendir(probe);
        assert_non_null(d);
        struct dirent *de;
        int n = 0;
        while ((de = readdir(d)))
                n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
        closedir(d);
        assert_int_equal(n, 0);
        /* Targets untouched. */
        char *t = get_file(s.fd, "keep/target");
        assert_non_null(t);
        assert_string_equal(t, "target");
        free(t);

        /* fsx_remove_at on each kind. */
        put_link(c, "l", "../keep");
        put_fifo(c, "f");
        put_dir(c, "d");
        put_dir(c, "d/e");
        put_link(c, "d/e/l", "../../../keep");
        assert_int_equal(fsx_remove_at(c, "l", &err), 0);
        assert_int_equal(fsx_remove_at(c, "f", &err), 0);
        assert_int_equal(fsx_remove_at(c, "d", &err), 0);
        assert_int_equal(fsx_remove_at(c, "missing", &err), 0);
        assert_int_equal(fsx_remove_at(c, "..", &err), -EINVAL);
        assert_int_equal(fsx_remove_at(c, "a/b", &err), -EINVAL);
        assert_int_equal(faccessat(s.fd, "keep/target", F_OK, 0), 0);
        close(c);
        scratch_free(&s);
}

/* Clearing goes on past an entry it cannot remove and reports the first. */
static void test_clear_reports_first_error(void **state)
{
        scratch s;
        scratch_new(&s);
        put_dir(s.fd, "c");
        int c = open_dir(s.fd, "c");
        put_file(c, "a", "a");
        put_dir(c, "busy");
        put_file(c, "z", "z");
        /* A mount point cannot be removed: EBUSY, reported, the others go.
         * Mounting needs privilege; without it the case is skipped. */
        char mp[128];
        snprintf(mp, sizeof(mp), "%s/c/busy", s.path);
        if (mount("none", mp, "tmpfs", 0, "size=64k") < 0) {
                close(c);
                scratch_free(&s);
                skip();
        }
        put_file(c, "busy/inside", "i");
        airlock_error err = {0};
        /* Removing the mount point itself leaves what is mounted alone. */
        assert_int_equal(fsx_remove_at(c, "busy", &err), -EBUSY);
        assert_non_null(strstr(err.message, "another file system is mounted there"));
        assert_int_equal(faccessat(c, "busy/inside", F_OK, AT_SYMLINK_NOFOLLOW), 0);
        int r = fsx_clear_dir(c, &err);
        assert_int_equal(r, -EBUSY);
        assert_string_equal(err.path, "busy");
        assert_int_equal(faccessat(c, "a", F_OK, AT_SYMLINK_NOFOLLOW), -1);
        assert_int_equal(faccessat(c, "z", F_OK, AT_SYMLINK_NOFOLLOW), -1);
        /* The other file system was not entered. */
        assert_int_equal(faccessat(c, "busy/inside", F_OK, AT_SYMLINK_NOFOLLOW), 0);
        assert_int_equal(umount(mp), 0);
        close(c);
        scratch_free(&s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_normalize_table),
            cmocka_unit_test(test_open_beneath),
            cmocka_unit_test(test_media_type_threads),
            cmocka_unit_test(test_media_type),
            cmocka_unit_test(test_capture_corpus),
            cmocka_unit_test(test_capture_caps),
            cmocka_unit_test(test_capture_refusal_cap),
            cmocka_unit_test(test_capture_changed),
            cmocka_unit_test(test_bad_utf8_names),
            cmocka_unit_test(test_capture_unreadable),
            cmocka_unit_test(test_capture_empty_tmpfs),
            cmocka_unit_test(test_devices),
            cmocka_unit_test(test_capture_and_clear_deep),
            cmocka_unit_test(test_clear_corpus),
            cmocka_unit_test(test_clear_reports_first_error),
            /* Key cases again with the component-by-component fallback. */
            cmocka_unit_test_setup_teardown(test_open_beneath, setup_fallback, teardown_fallback),
            cmocka_unit_test_setup_teardown(test_capture_corpus, setup_fallback, teardown_fallback),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
