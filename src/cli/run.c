/* airlock run: run code once in a fresh sandbox and report the result. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "base.h"

#define CODE_CAP (16u << 20)

static int cancel_pipe[2] = {-1, -1};

/* SIGINT and SIGTERM cancel the run; the normal path then closes the
 * sandbox, so no process or staging directory outlives us. */
static void on_signal(int sig)
{
        (void)sig;
        if (cancel_pipe[1] >= 0)
                (void)!write(cancel_pipe[1], "x", 1);
}

/* Reads all of fd up to cap bytes; more is an error naming the cap. */
static int read_all(int fd, const char *what, size_t cap, const char *cap_name, char **ret,
                    size_t *ret_len, airlock_error *err)
{
        dynbuf b;
        dynbuf_init(&b, cap);
        char buf[65536];
        for (;;) {
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        int e = errno;
                        dynbuf_free(&b);
                        return al_error(err, -e, what, "cannot read %s: %s", what, strerror(e));
                }
                if (n == 0)
                        break;
                if (dynbuf_append(&b, buf, (size_t)n) < 0) {
                        dynbuf_free(&b);
                        return al_error(err, -E2BIG, what, "%s is larger than the cap of %zu MiB%s",
                                        what, cap >> 20, cap_name);
                }
        }
        *ret = dynbuf_take(&b, ret_len);
        return *ret ? 0 : -ENOMEM;
}

static int read_code(int fd, const char *what, char **ret, size_t *ret_len, airlock_error *err)
{
        return read_all(fd, what, CODE_CAP, "", ret, ret_len, err);
}

static int load_code(const cli_options *o, char **ret, size_t *ret_len, airlock_error *err)
{
        if (o->code) {
                size_t len = strlen(o->code);
                if (len > CODE_CAP)
                        return al_error(err, -E2BIG, NULL, "-c: the code is larger than %u MiB",
                                        CODE_CAP >> 20);
                *ret = strdup(o->code);
                *ret_len = len;
                return *ret ? 0 : -ENOMEM;
        }
        if (!o->file || strcmp(o->file, "-") == 0)
                return read_code(STDIN_FILENO, "standard input", ret, ret_len, err);
        int fd = open(o->file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return al_error(err, -errno, o->file, "cannot open %s: %m", o->file);
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return al_error(err, -EINVAL, o->file, "%s is not a regular file", o->file);
        }
        int r = read_code(fd, o->file, ret, ret_len, err);
        close(fd);
        return r;
}

/* Whether the code point c would change what the terminal shows of other
 * text instead of showing itself: the C0 controls but tab and newline
 * (ESC starts a sequence that can erase a line, CR returns over it), DEL,
 * the C1 controls, and the marks, embeddings, overrides and isolates of
 * bidirectional text (U+202E reorders a line). */
static bool hides_text(uint32_t c)
{
        return (c < 0x20 && c != '\t' && c != '\n') || (c >= 0x7f && c < 0xa0) || c == 0x061c ||
               c == 0x200e || c == 0x200f || (c >= 0x202a && c <= 0x202e) ||
               (c >= 0x2066 && c <= 0x2069);
}

/* Writes the code (valid UTF-8: airlock_check_code() said so) to the
 * terminal as the reviewer must read it: each character that hides_text()
 * as "<U+XXXX>", visibly, and everything else as it is. */
static void put_code_visible(FILE *tty, const char *code)
{
        const unsigned char *p = (const unsigned char *)code;
        while (*p) {
                size_t len = *p < 0x80 ? 1 : *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : 2;
                uint32_t c = len == 1 ? *p : *p & (0x3f >> (len - 1));
                size_t i = 1;
                for (; i < len && (p[i] & 0xc0) == 0x80; i++)
                        c = c << 6 | (p[i] & 0x3f);
                if (i < len) /* not UTF-8 after all: show the byte */
                        c = *p, len = 1, i = 1;
                if (hides_text(c))
                        fprintf(tty, "<U+%04X>", (unsigned)c);
                else
                        fwrite(p, 1, len, tty);
                p += len;
        }
}

/* The approver of upstream tools' calls under --yes: the user approved
 * every call that needs it for this run. */
static bool approve_all(void *userdata, const char *tool, const char *args_json)
{
        (void)userdata;
        (void)tool;
        (void)args_json;
        return true;
}

/* Asks on the terminal whether an upstream MCP tool's call that needs
 * approval may go ahead. The arguments come from the guest: shown as JSON
 * (which escapes C0 controls), cut at 2000 bytes, with DEL and C1 controls
 * (U+0080 to U+009F) replaced, so that they cannot drive the terminal. */
static bool ask_tool(void *userdata, const char *tool, const char *args_json)
{
        (void)userdata;
        FILE *tty = fopen("/dev/tty", "r+e");
        if (!tty)
                return false;
        char shown[2048];
        size_t n = 0;
        for (const unsigned char *p = (const unsigned char *)args_json; *p && n < 2000; p++) {
                if (*p == 0x7f || *p < 0x20) {
                        shown[n++] = '?';
                } else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
                        shown[n++] = '?';
                        p++;
                } else {
                        shown[n++] = (char)*p;
                }
        }
        shown[n] = '\0';
        fprintf(tty, "airlock: the code calls %s(", tool);
        put_code_visible(tty, shown);
        fprintf(tty, "%s), which needs approval. Allow it? [y/N] ", n >= 2000 ? "..." : "");
        fflush(tty);
        char line[16] = "";
        bool yes = fgets(line, sizeof(line), tty) && (line[0] == 'y' || line[0] == 'Y');
        fclose(tty);
        return yes;
}

/* Asks on the terminal whether to run code that needs approval. The code
 * is shown with the characters that could hide a part of it escaped. */
static bool ask_approval(const char *code)
{
        FILE *tty = fopen("/dev/tty", "r+e");
        if (!tty)
                return false;
        fprintf(tty, "airlock: this code needs approval before it runs:\n"
                     "----------------------------------------\n");
        put_code_visible(tty, code);
        fprintf(tty, "\n----------------------------------------\n"
                     "Run it? [y/N] ");
        fflush(tty);
        char line[16] = "";
        bool yes = fgets(line, sizeof(line), tty) && (line[0] == 'y' || line[0] == 'Y');
        fclose(tty);
        return yes;
}

/* --output-dir: created when missing. A second run into the same folder
 * replaces the files it writes again and keeps the others, as a script
 * that writes its results to a folder does. */
static int open_output_dir(const char *dir, airlock_error *err)
{
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return al_error(err, -errno, dir, "--output-dir %s: %m", dir);
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return al_error(err, -errno, dir, "--output-dir %s: %m", dir);
        return fd;
}

/* Writes one file's bytes as name below cur: into a new file of a
 * temporary name, then renamed over name, so that a file of that name from
 * an earlier run is replaced, never written through (a hard link of it
 * elsewhere keeps its bytes) and a link named so is replaced itself, never
 * followed. */
static int replace_file(int cur, const char *name, const airlock_file *f)
{
        char tmp[64];
        int fd = -1;
        for (unsigned i = 0; fd < 0 && i < 100; i++) {
                snprintf(tmp, sizeof(tmp), ".airlock-%ld-%u.tmp", (long)getpid(), i);
                fd = openat(cur, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
                if (fd < 0 && errno != EEXIST)
                        return -errno;
        }
        if (fd < 0)
                return -EEXIST;
        int r = al_write_full(fd, f->data, f->size);
        if (close(fd) < 0 && r >= 0)
                r = -errno;
        if (r >= 0 && renameat(cur, tmp, cur, name) < 0)
                r = -errno;
        if (r < 0)
                (void)unlinkat(cur, tmp, 0);
        return r;
}

/* Writes a captured file below dirfd, creating parents, never following a
 * link: the names come from the guest, and DIR may hold the user's files. */
static int write_output_file(int dirfd, const airlock_file *f, airlock_error *err)
{
        const char *rel = f->path + strlen("/output/");
        _cleanup_free_ char *copy = strdup(rel);
        if (!copy)
                return -ENOMEM;
        int cur = dup(dirfd);
        char *save = NULL, *part = strtok_r(copy, "/", &save);
        while (part) {
                char *next = strtok_r(NULL, "/", &save);
                if (!next) {
                        int r = replace_file(cur, part, f);
                        close(cur);
                        if (r < 0)
                                return al_error(err, r, f->path, "cannot write %s: %s", f->path,
                                                strerror(-r));
                        return 0;
                }
                if (mkdirat(cur, part, 0755) < 0 && errno != EEXIST) {
                        close(cur);
                        return al_error(err, -errno, f->path, "cannot create a folder for %s: %m",
                                        f->path);
                }
                int nfd = openat(cur, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                close(cur);
                if (nfd < 0)
                        return al_error(err, -errno, f->path, "cannot open a folder for %s: %m",
                                        f->path);
                cur = nfd;
                part = next;
        }
        close(cur);
        return 0;
}

/* Live output: the code's stdout and stderr written to ours as they reach
 * the host, as `python3 script.py` and `docker run` do, each cut at
 * --max-stdout as the result's copy is. A stream whose reader went away
 * (EPIPE) is no longer written. */
typedef struct live_output {
        uint64_t cap;
        uint64_t written[3];
        bool cut[3], broken[3];
} live_output;

static void on_live_output(void *arg, int stream, const char *data, size_t len)
{
        live_output *lo = arg;
        if (stream != 1 && stream != 2)
                return;
        if (lo->written[stream] + len > lo->cap) {
                lo->cut[stream] = true;
                len = (size_t)(lo->cap - lo->written[stream]);
        }
        lo->written[stream] += len;
        if (len && !lo->broken[stream]) {
                if (stream == 2)
                        fflush(stdout);
                if (al_write_full(stream, data, len) < 0)
                        lo->broken[stream] = true;
        }
}

/* The result for a person: the output (unless it was shown live), then a
 * line for each file, saying where it was written on the host, or how to
 * keep it. */
static void print_human(const airlock_result *res, const live_output *live, const char *output_dir,
                        const bool *written)
{
        if (!live) {
                fwrite(res->stdout_data, 1, res->stdout_len, stdout);
                fflush(stdout);
                fwrite(res->stderr_data, 1, res->stderr_len, stderr);
        }
        if (live ? live->cut[1] : res->stdout_truncated)
                fprintf(stderr, "airlock: stdout was truncated at --max-stdout\n");
        if (live ? live->cut[2] : res->stderr_truncated)
                fprintf(stderr, "airlock: stderr was truncated at --max-stdout\n");
        for (size_t i = 0; i < res->n_files; i++) {
                const airlock_file *f = &res->files[i];
                fprintf(stderr, "airlock: file %s (%s, %llu bytes)", f->path, f->media_type,
                        (unsigned long long)f->size);
                if (!output_dir)
                        fprintf(stderr, ", not kept: --output-dir DIR writes the files to DIR\n");
                else if (written[i])
                        fprintf(stderr, " written to %s/%s\n", output_dir,
                                f->path + strlen("/output/"));
                else
                        fprintf(stderr, " not written (above)\n");
        }
        for (size_t i = 0; i < res->n_refused; i++)
                fprintf(stderr, "airlock: refused %s: %s\n", res->refused[i].path,
                        res->refused[i].reason);
        if (!res->success && res->error_message)
                fprintf(stderr, "airlock: %s\n", res->error_message);
}

/* What the code gets beside its text: the command's standard input, with
 * FILE or -c, and sys.argv, as python3 makes it (the script's name, or
 * "-c", then the arguments). A regular file (`< data`) is read to its end
 * up to the library's cap and becomes fd 0 of the code and the processes it
 * starts. Anything else (a pipe, a socket, a terminal) may stay open for as
 * long as the program that holds its other end (an agent's framework that
 * spawns the command and never closes its stdin), so it is streamed: the
 * library reads it only when the code reads (*ret_stream), as python3 reads
 * a pipe, and a run whose code never reads it ends without waiting on it. */
static int code_inputs(const cli_options *o, char **ret_input, size_t *ret_input_len,
                       bool *ret_stream, const char ***ret_argv, airlock_error *err)
{
        bool own_stdin = o->code || (o->file && strcmp(o->file, "-"));
        struct stat in_st;
        *ret_stream = false;
        if (own_stdin && fstat(STDIN_FILENO, &in_st) == 0 && !S_ISREG(in_st.st_mode))
                *ret_stream = true;
        else if (own_stdin && fstat(STDIN_FILENO, &in_st) == 0) {
                int r = read_all(STDIN_FILENO, "standard input", AIRLOCK_RUN_STDIN_MAX,
                                 " that a run reads (AIRLOCK_RUN_STDIN_MAX); pass a larger input "
                                 "with --workspace or --mount",
                                 ret_input, ret_input_len, err);
                if (r < 0)
                        return r;
        }
        if (o->code || o->file || o->n_args) {
                const char **v = calloc((size_t)o->n_args + 2, sizeof(*v));
                if (!v)
                        return al_error(err, -ENOMEM, NULL, "out of memory");
                v[0] = o->code ? "-c" : o->file ? o->file : "";
                for (int i = 0; i < o->n_args; i++)
                        v[i + 1] = o->args[i];
                *ret_argv = v;
        }
        return 0;
}

/* The run's files to --output-dir (each failure said on stderr, the others
 * kept), then the result: one JSON document with --json, else the lines
 * after the output that was shown live. */
static int report_result(const airlock_result *res, const cli_options *o, int outfd,
                         live_output *live, airlock_error *err)
{
        _cleanup_free_ bool *written = calloc(res->n_files + 1, sizeof(bool));
        if (!written)
                return al_error(err, -ENOMEM, NULL, "out of memory");
        if (outfd >= 0)
                for (size_t i = 0; i < res->n_files; i++) {
                        written[i] = write_output_file(outfd, &res->files[i], err) >= 0;
                        if (!written[i])
                                fprintf(stderr, "airlock: --output-dir %s: %s\n", o->output_dir,
                                        err->message);
                }
        if (o->json) {
                char *s = airlock_result_to_json(res);
                if (s) {
                        puts(s);
                        free(s);
                }
        } else {
                print_human(res, live, outfd >= 0 ? o->output_dir : NULL, written);
        }
        return 0;
}

/* The approvals a run needs: the code's, when the configuration asks for
 * it and --yes does not give it (a person at the terminal is asked), and
 * the approver of upstream tools' calls (--yes, or the person at each
 * call). -EPERM when the code is not approved. */
static int approve(const cli_options *o, const char *code, airlock_error *err)
{
        if (airlock_config_effective_approval(o->cfg) == AIRLOCK_APPROVAL_ALWAYS && !o->yes) {
                bool interactive =
                    isatty(STDIN_FILENO) || (o->code || (o->file && strcmp(o->file, "-")));
                if (!interactive || !isatty(STDERR_FILENO) || !ask_approval(code))
                        return al_error(err, -EPERM, NULL,
                                        "approval required and not given: nothing ran (pass "
                                        "--yes to approve)");
        }
        if (o->yes)
                airlock_config_set_tool_approver(o->cfg, approve_all, NULL);
        else if (isatty(STDERR_FILENO))
                airlock_config_set_tool_approver(o->cfg, ask_tool, NULL);
        return 0;
}

int cmd_run(int argc, char **argv)
{
        airlock_error err;
        airlock_error_clear(&err);
        cli_options o;
        int r = cli_parse_options(argc, argv, CLI_RUN, &o, &err);
        if (r == 1) {
                cli_usage(CLI_RUN, stdout);
                return EXIT_OK;
        }
        if (r < 0) {
                fprintf(stderr, "airlock: %s\n", err.message);
                return EXIT_USAGE;
        }
        int status = EXIT_USAGE;
        char *code = NULL, *input = NULL;
        size_t len = 0, input_len = 0;
        const char **script_argv = NULL;
        bool stream = false;
        int outfd = -1;
        airlock_sandbox *sb = NULL;
        airlock_result *res = NULL;

        r = load_code(&o, &code, &len, &err);
        if (r < 0)
                goto fail;
        r = code_inputs(&o, &input, &input_len, &stream, &script_argv, &err);
        if (r < 0)
                goto fail;
        /* What a run would refuse (a NUL byte, bad UTF-8) is refused now,
         * before anyone is asked to approve the code. */
        r = airlock_check_code(code, len, &err);
        if (r < 0)
                goto fail;
        r = approve(&o, code, &err);
        if (r < 0)
                goto fail;
        if (o.output_dir) {
                outfd = open_output_dir(o.output_dir, &err);
                if (outfd < 0) {
                        r = outfd;
                        goto fail;
                }
        }

        if (pipe2(cancel_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
                struct sigaction sa = {.sa_handler = on_signal};
                sigemptyset(&sa.sa_mask);
                sigaction(SIGINT, &sa, NULL);
                sigaction(SIGTERM, &sa, NULL);
                sigaction(SIGHUP, &sa, NULL);
        }
        /* One run: the template prepares nothing for a next one. */
        r = airlock_sandbox_new_oneshot(o.cfg, &sb, &err);
        if (r < 0) {
                status = cli_exit_status(&err);
                goto fail;
        }
        print_warnings(airlock_sandbox_warnings(sb), "airlock");
        airlock_run_options ropts = AIRLOCK_RUN_OPTIONS_INIT;
        ropts.cancel_fd = cancel_pipe[0];
        ropts.last = true;
        ropts.argv = script_argv;
        ropts.stdin_data = input;
        ropts.stdin_len = input_len;
        /* The caller's trace, as the OpenTelemetry convention for a
         * process's environment names it (docs/tracing.md). */
        ropts.traceparent = getenv("TRACEPARENT");
        ropts.tracestate = getenv("TRACESTATE");
        ropts.baggage = getenv("BAGGAGE");
        if (stream) {
                ropts.stdin_mode = AIRLOCK_STDIN_STREAM;
                ropts.stdin_fd = STDIN_FILENO;
        }
        /* Without --json the output is shown as it comes; --json keeps
         * one document at the end. */
        airlock_limits lim;
        airlock_config_get_limits(o.cfg, &lim);
        live_output live = {.cap = lim.max_stdout};
        if (!o.json) {
                ropts.on_output = on_live_output;
                ropts.output_arg = &live;
                signal(SIGPIPE, SIG_IGN);
        }
        r = airlock_sandbox_run(sb, code, len, &ropts, &res, &err);
        if (r < 0) {
                status = cli_exit_status(&err);
                goto fail;
        }
        r = report_result(res, &o, outfd, &live, &err);
        if (r < 0) {
                status = EXIT_SANDBOX;
                goto fail;
        }
        status = res->success ? EXIT_OK : EXIT_CODE_FAILED;
        goto out;
fail:
        fprintf(stderr, "airlock: %s\n", err.message);
out:
        airlock_result_free(res);
        airlock_sandbox_close(sb);
        if (outfd >= 0)
                close(outfd);
        free(code);
        free(input);
        free(script_argv);
        cli_options_free(&o);
        return status;
}
