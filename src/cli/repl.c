/* airlock repl: a session tried by hand. Cells are read from standard input
 * as the Python prompt reads them: a line is a cell, unless it ends with
 * ':' or '\' or leaves a bracket open, in which case the cell goes on to
 * the next empty line (a block) or to the line that closes the bracket.
 * Each cell runs in one session (airlock_session_run): its output is
 * printed, with what became of the state when the cell failed. Ctrl-C
 * cancels the cell in progress, which rolls back; the session goes on.
 * End of input closes the session. Two commands, which no Python cell can
 * be: ":fork" forks the current session (airlock_session_fork) and goes on
 * in the fork, ":use N" goes back to session N (0 is the first). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "cli.h"

static int cancel_pipe[2] = {-1, -1};

static void on_interrupt(int sig)
{
        (void)sig;
        int saved = errno;
        (void)!write(cancel_pipe[1], "c", 1);
        errno = saved;
}

/* Empties the cancel pipe before a cell, so that a Ctrl-C at the prompt
 * does not cancel the next cell. */
static void drain_cancel(void)
{
        char buf[64];
        while (read(cancel_pipe[0], buf, sizeof(buf)) > 0)
                ;
}

/* How far a line opens brackets (outside strings, roughly: quotes and
 * comments are skipped on the line). */
static int bracket_depth(const char *line, int depth)
{
        char quote = 0;
        for (const char *p = line; *p; p++) {
                if (quote) {
                        if (*p == '\\' && p[1])
                                p++;
                        else if (*p == quote)
                                quote = 0;
                        continue;
                }
                if (*p == '#')
                        break;
                if (*p == '\'' || *p == '"')
                        quote = *p;
                else if (strchr("([{", *p))
                        depth++;
                else if (strchr(")]}", *p) && depth > 0)
                        depth--;
        }
        return depth;
}

/* Reads one cell into b. Returns false at end of input with nothing read. */
static bool read_cell(FILE *in, bool tty, dynbuf *b)
{
        char *line = NULL;
        size_t cap = 0;
        bool block = false;
        int depth = 0;
        b->len = 0;
        for (;;) {
                if (tty) {
                        fputs(b->len ? "... " : ">>> ", stdout);
                        fflush(stdout);
                }
                ssize_t n = getline(&line, &cap, in);
                if (n < 0) {
                        /* Ctrl-D after a "... " prompt: the cell's output
                         * starts on a line of its own, not after the
                         * prompt ("... 0"). */
                        if (tty && b->len)
                                fputc('\n', stdout);
                        break;
                }
                while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                        line[--n] = '\0';
                bool empty = strspn(line, " \t") == (size_t)n;
                if (empty && !b->len)
                        continue;
                if (empty && depth == 0)
                        break; /* the end of a block */
                dynbuf_append(b, line, (size_t)n);
                dynbuf_append(b, "\n", 1);
                depth = bracket_depth(line, depth);
                const char *end = line + n;
                while (end > line && (end[-1] == ' ' || end[-1] == '\t'))
                        end--;
                bool opens = end > line && (end[-1] == ':' || end[-1] == '\\');
                /* An indented line or one that opens a block: the cell is a
                 * block, which an empty line ends. */
                if (opens || line[0] == ' ' || line[0] == '\t')
                        block = true;
                if (!block && depth == 0)
                        break;
        }
        free(line);
        return b->len > 0;
}

static void print_result(const airlock_result *res)
{
        if (res->stdout_len)
                fwrite(res->stdout_data, 1, res->stdout_len, stdout);
        fflush(stdout);
        if (res->stderr_len)
                fwrite(res->stderr_data, 1, res->stderr_len, stderr);
        for (size_t i = 0; i < res->n_files; i++)
                fprintf(stderr, "[%s: %s, %llu bytes]\n", res->files[i].path,
                        res->files[i].media_type, (unsigned long long)res->files[i].size);
        if (!res->success && res->error_message)
                fprintf(stderr, "[%s]\n", res->error_message);
        if (res->cell_state == AIRLOCK_CELL_ROLLED_BACK)
                fprintf(stderr, "[state rolled back: the variables are as before this cell]\n");
        else if (res->cell_state == AIRLOCK_CELL_NONE)
                fprintf(stderr, "[the session ended]\n");
}

/* Whether the cell is exit() or quit() (or exit, quit, exit(N),
 * quit(N)), which leave the REPL as they leave Python's; *ret_status is
 * N, or 0. A cell that calls them among other code ends as a failed or
 * succeeded cell does: the session goes on. */
static bool repl_exit(const dynbuf *b, int *ret_status)
{
        char word[8] = "";
        int n = 0, end = 0, code = 0;
        const char *s = b->data;
        s += strspn(s, " \t");
        if (sscanf(s, "%5[a-z]%n", word, &n) != 1 || (strcmp(word, "exit") && strcmp(word, "quit")))
                return false;
        s += n;
        s += strspn(s, " \t");
        if (*s == '(') {
                s++;
                s += strspn(s, " \t");
                if (sscanf(s, "%d%n", &code, &end) == 1)
                        s += end;
                s += strspn(s, " \t");
                if (*s++ != ')')
                        return false;
        }
        if (s[strspn(s, " \t\r\n")] != '\0')
                return false;
        *ret_status = code & 0xff;
        return true;
}

#define REPL_MAX_SESSIONS 16

/* Runs a ":" command of the cell in b, if it is one: true when it was. */
static bool repl_command(const dynbuf *b, airlock_session **ss, size_t *n, size_t *cur)
{
        if (b->len < 2 || b->data[0] != ':')
                return false;
        airlock_error err;
        unsigned k;
        if (strcmp(b->data, ":fork\n") == 0) {
                if (*n == REPL_MAX_SESSIONS)
                        fprintf(stderr, "[at most %d sessions]\n", REPL_MAX_SESSIONS);
                else if (airlock_session_fork(ss[*cur], &ss[*n], &err) < 0)
                        fprintf(stderr, "airlock repl: %s\n", err.message);
                else {
                        fprintf(stderr, "[session %zu: a fork of session %zu]\n", *n, *cur);
                        *cur = (*n)++;
                }
        } else if (sscanf(b->data, ":use %u", &k) == 1 && k < *n) {
                *cur = k;
                fprintf(stderr, "[session %u]\n", k);
        } else {
                fprintf(stderr, "[commands: :fork, :use N (0 to %zu)]\n", *n - 1);
        }
        return true;
}

int cmd_repl(int argc, char **argv)
{
        cli_options o;
        airlock_error err = {0};
        int r = cli_parse_options(argc, argv, CLI_REPL, &o, &err);
        if (r == 1) {
                cli_usage(CLI_REPL, stdout);
                return EXIT_OK;
        }
        if (r < 0) {
                fprintf(stderr, "airlock repl: %s\n", err.message);
                return EXIT_USAGE;
        }
        airlock_sandbox *sb = NULL;
        airlock_session *s = NULL;
        r = airlock_sandbox_new(o.cfg, &sb, &err);
        if (r >= 0)
                r = airlock_session_open(sb, &s, &err);
        if (r < 0) {
                fprintf(stderr, "airlock repl: %s\n", err.message);
                airlock_sandbox_close(sb);
                cli_options_free(&o);
                return cli_exit_status(&err);
        }
        print_warnings(airlock_sandbox_warnings(sb), "airlock repl");
        bool tty = isatty(STDIN_FILENO);
        if (pipe2(cancel_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
                struct sigaction sa = {.sa_handler = on_interrupt};
                sigemptyset(&sa.sa_mask);
                sa.sa_flags = SA_RESTART;
                sigaction(SIGINT, &sa, NULL);
        }
        if (tty)
                fprintf(stderr,
                        "airlock repl: a session; each cell keeps its state when it succeeds and "
                        "rolls back when it fails. Ctrl-C cancels a cell, Ctrl-D ends.\n");
        int status = EXIT_OK;
        dynbuf cell;
        dynbuf_init(&cell, 16u << 20);
        airlock_session *ss[REPL_MAX_SESSIONS] = {s};
        size_t n_ss = 1, cur = 0;
        while (read_cell(stdin, tty, &cell)) {
                if (repl_command(&cell, ss, &n_ss, &cur))
                        continue;
                if (repl_exit(&cell, &status))
                        break;
                s = ss[cur];
                drain_cancel();
                airlock_run_options opts = AIRLOCK_RUN_OPTIONS_INIT;
                opts.cancel_fd = cancel_pipe[0];
                airlock_result *res = NULL;
                r = airlock_session_run(s, cell.data, cell.len, &opts, &res, &err);
                if (r < 0) {
                        fprintf(stderr, "airlock repl: %s\n", err.message);
                        status = cli_exit_status(&err);
                        break;
                }
                print_result(res);
                bool ended = !airlock_session_alive(s);
                airlock_result_free(res);
                if (ended) {
                        status = EXIT_SANDBOX;
                        break;
                }
        }
        if (tty)
                fputc('\n', stdout);
        dynbuf_free(&cell);
        for (size_t i = 0; i < n_ss; i++)
                airlock_session_close(ss[i]);
        airlock_sandbox_close(sb);
        cli_options_free(&o);
        return status;
}
