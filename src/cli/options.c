/* The command line's options: the table of option_table.h made into every
 * command's --help, its getopt parser and its messages, the man page, the
 * shell completion and the documents' option table. Numbers are parsed
 * strictly: the whole text must be a number in range, or the option is
 * refused with a message naming it and its value. The limits' options, their
 * units and ranges are the library's (the limits table, through
 * airlock_limit_option_at and airlock_limits_set_option). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "trace.h"
#include "base.h"
#include "tenants.h"

/* More --tools files than anyone writes by hand; the cap keeps the list on
 * the stack. */
#define CLI_MAX_TOOLS_FILES 64

/* The limits' options (airlock_limit_option_at) come from the library; the
 * cap keeps their getopt entries on the stack. */
#define CLI_MAX_LIMIT_OPTIONS 32

typedef struct cli_row {
        cli_option_id id;
        const char *name;
        char short_opt;
        const char *arg;
        unsigned commands;
        cli_group group;
        const char *dflt;
        const char *help;
        const char *text;
} cli_row;

#define CLI_ROW(id_, name_, short_, arg_, cmds_, group_, dflt_, help_, text_)                      \
        {CLI_OPT_##id_, name_, short_, arg_, cmds_, group_, dflt_, help_, text_},
static const cli_row rows[] = {CLI_OPTIONS(CLI_ROW)};
#undef CLI_ROW

static const struct {
        cli_command cmd;
        const char *name, *args, *what;
} commands[] = {
    {CLI_RUN, "run", "[OPTIONS] [FILE [ARG...]]",
     "run code once: FILE, -c CODE, or standard input"},
    {CLI_MCP, "mcp", "[OPTIONS]", "serve the execute_code tool over MCP on stdio"},
    {CLI_SERVE, "serve", "[OPTIONS]", "serve it over MCP Streamable HTTP at /mcp"},
    {CLI_DESCRIBE, "describe", "[OPTIONS]", "print the tool description and agent instructions"},
    {CLI_REPL, "repl", "[OPTIONS]", "run cells from a terminal or standard input in one session"},
    {CLI_KERNEL, "kernel", "[install] [OPTIONS]", "a Jupyter kernel: its cells run in one session"},
};

static const char *const group_titles[] = {
    [CLI_G_RUN] = "options of the command",
    [CLI_G_SERVE] = "HTTP serving",
    [CLI_G_SERVERS] = "MCP serving",
    [CLI_G_SESSION] = "sessions",
    [CLI_G_CONFIG] = "configuration of the sandbox",
    [CLI_G_LAST] = "",
};

/* Words after a command's options in its --help: what no single option's
 * line can say. */
static const char serve_notes[] =
    "SIGHUP re-reads the tokens and the configuration options (tools files, allow-list, limits,\n"
    "--secret file:PATH; an env:VAR secret cannot change in a running process) for the calls\n"
    "that start afterwards; one that does not load keeps the old. Calls in flight and open\n"
    "sessions keep theirs; the HTTP, session and --audit options are not reloaded. airlock mcp\n"
    "stops on SIGHUP instead.\n";

static const char run_notes[] =
    "ARGs after FILE (or after -c CODE) are the code's sys.argv[1:]; sys.argv[0] is FILE or\n"
    "-c. With FILE or -c the code reads the command's standard input (sys.stdin, input()):\n"
    "a file (< data) read before the run, at most 8 MiB; a pipe or a terminal streamed while\n"
    "the code runs, read only when it reads, at most 64 MiB. Without either, standard input\n"
    "is the code.\n"
    "Without --json the code's stdout and stderr are shown as they come (print(..., flush=True)\n"
    "shows a line at once), then a line for each file the run returned: where --output-dir\n"
    "wrote it, or how to keep it.\n";

static const char *command_name(cli_command cmd)
{
        for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
                if (commands[i].cmd == cmd)
                        return commands[i].name;
        return "?";
}

/* The commands that take row r, as "run, describe". */
static void row_commands(const cli_row *r, char *buf, size_t size)
{
        size_t n = 0;
        buf[0] = '\0';
        for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
                if (r->commands & commands[i].cmd)
                        n += (size_t)snprintf(buf + n, n < size ? size - n : 0, "%s%s",
                                              n ? ", " : "", commands[i].name);
}

/* "-w, --workspace DIR", "    --json", "-c, --code CODE". */
static void row_left(const cli_row *r, char *buf, size_t size)
{
        char shortp[8] = "    ";
        if (r->short_opt)
                snprintf(shortp, sizeof(shortp), "-%c%s", r->short_opt, r->name ? ", " : "");
        snprintf(buf, size, "%s%s%s%s%s", shortp, r->name ? "--" : "", r->name ? r->name : "",
                 r->arg ? " " : "", r->arg ? r->arg : "");
}

/* One line of --help: the option, then what it does and its default. */
static void print_option_line(FILE *f, const char *left, const char *help, const char *dflt)
{
        if (strlen(left) > 30)
                fprintf(f, "  %s\n  %-30s %s", left, "", help);
        else
                fprintf(f, "  %-30s %s", left, help);
        fprintf(f, dflt && *dflt ? " (%s)\n" : "\n", dflt);
}

static void print_limits(FILE *f)
{
        airlock_limits defaults;
        airlock_limits_default(&defaults);
        const airlock_limit_option *lo;
        for (size_t i = 0; i < CLI_MAX_LIMIT_OPTIONS && (lo = airlock_limit_option_at(i)); i++) {
                char left[64], dflt[32];
                snprintf(left, sizeof(left), "    --%s %s", lo->name, lo->unit);
                if (airlock_limits_format_option(&defaults, lo->name, dflt, sizeof(dflt)) < 0)
                        dflt[0] = '\0';
                print_option_line(f, left, lo->help, dflt);
        }
}

void cli_usage(cli_command cmd, FILE *f)
{
        const char *name = command_name(cmd);
        for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
                if (commands[i].cmd == cmd)
                        fprintf(f, "usage: airlock %s %s\n%s.\n", name, commands[i].args,
                                commands[i].what);
        for (int g = 0; g <= CLI_G_LAST; g++) {
                bool any = false;
                for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
                        const cli_row *r = &rows[i];
                        if ((int)r->group != g || !(r->commands & cmd))
                                continue;
                        if (!any && *group_titles[g])
                                fprintf(f, "\n%s:\n", group_titles[g]);
                        any = true;
                        char left[128];
                        row_left(r, left, sizeof(left));
                        print_option_line(f, left, r->help, r->dflt);
                        if (r->id == CLI_OPT_TOOLS)
                                print_limits(f);
                }
        }
        if (cmd == CLI_SERVE)
                fprintf(f, "\n%s", serve_notes);
        if (cmd == CLI_RUN)
                fprintf(f, "\n%s", run_notes);
}

void cli_usage_main(FILE *f)
{
        fputs("usage: airlock COMMAND [OPTIONS]\n\ncommands:\n", f);
        for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
                char left[64];
                snprintf(left, sizeof(left), "%s %s", commands[i].name, commands[i].args);
                fprintf(f, "  %-26s %s\n", left, commands[i].what);
        }
        fputs("  version                    print airlock's version\n"
              "  help [--man|--markdown|--bash]  this text, or the manual page, the options\n"
              "                             table or the bash completion, from the option table\n"
              "\nairlock COMMAND --help lists the options of COMMAND.\n",
              f);
}

/* --mount HOST[:PATH]: the last ':' splits, so HOST may not contain one
 * unless a PATH follows. */
static int add_mount(airlock_config *cfg, const char *arg, airlock_error *err)
{
        const char *colon = strrchr(arg, ':');
        if (!colon)
                return airlock_config_add_mount(cfg, arg, NULL, err);
        _cleanup_free_ char *host = strndup(arg, (size_t)(colon - arg));
        if (!host)
                return -ENOMEM;
        return airlock_config_add_mount(cfg, host, colon + 1, err);
}

/* --allow-domain TARGET[=METHODS] */
static int add_allow(airlock_config *cfg, const char *arg, airlock_error *err)
{
        const char *eq = strchr(arg, '=');
        if (!eq)
                return airlock_config_allow(cfg, arg, NULL, err);
        _cleanup_free_ char *target = strndup(arg, (size_t)(eq - arg));
        if (!target)
                return -ENOMEM;
        return airlock_config_allow(cfg, target, eq + 1, err);
}

/* The values of the environment variables that env: secrets were read
 * from. The first read takes a variable out of the environment: the
 * process's own (its bytes zeroed, so /proc/PID/environ no longer shows
 * them) and so every command tool's, which starts with this environment. A
 * later read (airlock serve's reload on SIGHUP parses the options again)
 * finds the value here. At most as many as secrets may be declared. */
#define CLI_ENV_SECRETS_MAX 64
static struct {
        char *var, *value;
} env_secrets[CLI_ENV_SECRETS_MAX];

/* Returns the value of var for a secret, taken out of the environment on
 * the first call, or NULL when it is not set. The first call for each
 * variable must come before any other thread runs (option parsing at
 * start); later calls only read the table. */
static const char *env_secret_take(const char *var)
{
        size_t i;
        for (i = 0; i < CLI_ENV_SECRETS_MAX && env_secrets[i].var; i++)
                if (strcmp(env_secrets[i].var, var) == 0)
                        return env_secrets[i].value;
        char *v = getenv(var);
        if (!v || i == CLI_ENV_SECRETS_MAX)
                return v;
        char *name = strdup(var), *value = strdup(v);
        if (!name || !value) {
                free(name);
                free(value);
                return NULL;
        }
        env_secrets[i].var = name;
        env_secrets[i].value = value;
        explicit_bzero(v, strlen(v));
        unsetenv(var);
        return value;
}

/* Reads a secret's value from "env:VAR" or "file:PATH" (one trailing
 * newline dropped, as a file written by echo has). The value is never taken
 * from the command line itself: other users can read that in /proc. */
#define CLI_SECRET_FILE_MAX 8192
static int secret_value(const char *name, const char *src, char **ret, size_t *ret_len,
                        airlock_error *err)
{
        if (strncmp(src, "env:", 4) == 0) {
                const char *v = env_secret_take(src + 4);
                if (!v)
                        return al_error(err, -ENOENT, NULL,
                                        "--secret %s: the environment variable %s is not set", name,
                                        src + 4);
                *ret_len = strlen(v);
                *ret = strdup(v);
                return *ret ? 0 : -ENOMEM;
        }
        if (strncmp(src, "file:", 5) == 0) {
                _cleanup_close_ int fd = open(src + 5, O_RDONLY | O_CLOEXEC | O_NOCTTY);
                if (fd < 0)
                        return al_error(err, -errno, src + 5, "--secret %s: cannot open %s: %s",
                                        name, src + 5, strerror(errno));
                char *buf = malloc(CLI_SECRET_FILE_MAX + 2);
                if (!buf)
                        return -ENOMEM;
                size_t n = 0;
                for (;;) {
                        ssize_t k = read(fd, buf + n, CLI_SECRET_FILE_MAX + 1 - n);
                        if (k < 0 && errno == EINTR)
                                continue;
                        if (k < 0) {
                                int e = -errno;
                                explicit_bzero(buf, n);
                                free(buf);
                                return al_error(err, e, src + 5, "--secret %s: cannot read %s",
                                                name, src + 5);
                        }
                        if (k == 0 || (n += (size_t)k) > CLI_SECRET_FILE_MAX)
                                break;
                }
                if (n > CLI_SECRET_FILE_MAX) {
                        explicit_bzero(buf, n);
                        free(buf);
                        return al_error(err, -E2BIG, src + 5,
                                        "--secret %s: %s holds more than %d bytes", name, src + 5,
                                        CLI_SECRET_FILE_MAX);
                }
                if (n && buf[n - 1] == '\n')
                        n--;
                if (n && buf[n - 1] == '\r')
                        n--;
                buf[n] = '\0';
                *ret = buf;
                *ret_len = n;
                return 0;
        }
        return al_error(err, -EINVAL, NULL,
                        "--secret %s: the value comes from env:VAR or file:PATH, never from the "
                        "command line",
                        name);
}

/* --secret NAME[+query][+body]=SOURCE@TARGET[=METHODS][@TARGET[=METHODS]...]:
 * '@' splits, as no allow-list target may hold one (no userinfo). */
static int add_secret(airlock_config *cfg, const char *arg, airlock_error *err)
{
        _cleanup_free_ char *copy = strdup(arg);
        if (!copy)
                return -ENOMEM;
        char *eq = strchr(copy, '=');
        char *at = eq ? strchr(eq, '@') : NULL;
        if (!eq || !at)
                return al_error(err, -EINVAL, NULL,
                                "--secret: '%.80s' is not NAME=env:VAR@TARGET[=METHODS] (or "
                                "file:PATH)",
                                eq ? copy : arg);
        *eq = '\0';
        *at = '\0';
        unsigned flags = 0;
        char *plus = strchr(copy, '+');
        if (plus) {
                *plus = '\0';
                char *save = NULL;
                for (char *p = strtok_r(plus + 1, "+", &save); p; p = strtok_r(NULL, "+", &save)) {
                        if (strcmp(p, "query") == 0)
                                flags |= AIRLOCK_SECRET_IN_QUERY;
                        else if (strcmp(p, "body") == 0)
                                flags |= AIRLOCK_SECRET_IN_BODY;
                        else
                                return al_error(err, -EINVAL, NULL,
                                                "--secret %s: '+%s' is not '+query' or '+body'",
                                                copy, p);
                }
        }
        const char *targets[17];
        size_t n = 0;
        for (char *t = at + 1; t; n++) {
                if (n >= 16)
                        return al_error(err, -E2BIG, NULL, "--secret %s: more than 16 targets",
                                        copy);
                char *next = strchr(t, '@');
                if (next)
                        *next++ = '\0';
                targets[n] = t;
                t = next;
        }
        targets[n] = NULL;
        char *value = NULL;
        size_t len = 0;
        int r = secret_value(copy, eq + 1, &value, &len, err);
        if (r < 0)
                return r;
        r = airlock_config_add_secret(cfg, copy, value, len, flags, targets, err);
        explicit_bzero(value, len);
        free(value);
        return r;
}

static int add_preloads(airlock_config *cfg, const char *arg, airlock_error *err)
{
        _cleanup_free_ char *copy = strdup(arg);
        if (!copy)
                return -ENOMEM;
        char *save = NULL;
        int n = 0;
        for (char *m = strtok_r(copy, ",", &save); m; m = strtok_r(NULL, ",", &save)) {
                int r = airlock_config_add_preload(cfg, m, err);
                if (r < 0)
                        return r;
                n++;
        }
        if (!n)
                return al_error(err, -EINVAL, NULL, "--preload: no module named in '%s'", arg);
        return 0;
}

/* The row of option id. */
static const cli_row *row_of(int id)
{
        for (size_t i = 0; i < ARRAY_SIZE(rows); i++)
                if ((int)rows[i].id == id)
                        return &rows[i];
        return NULL;
}

/* The row whose long name is name (text up to '=' or the end), or whose
 * short form is the letter of "-X": for the message about an option that
 * another command takes. */
static const cli_row *row_named(const char *arg)
{
        if (arg[0] != '-')
                return NULL;
        if (arg[1] != '-') {
                for (size_t i = 0; i < ARRAY_SIZE(rows); i++)
                        if (rows[i].short_opt && rows[i].short_opt == arg[1])
                                return &rows[i];
                return NULL;
        }
        size_t n = strcspn(arg + 2, "=");
        for (size_t i = 0; i < ARRAY_SIZE(rows); i++)
                if (rows[i].name && strlen(rows[i].name) == n &&
                    strncmp(rows[i].name, arg + 2, n) == 0)
                        return &rows[i];
        return NULL;
}

static int number(const char *opt, const char *text, double lo, double hi, bool whole, double *ret,
                  airlock_error *err)
{
        char *end = NULL;
        errno = 0;
        double v = text ? strtod(text, &end) : 0;
        if (!text || !*text || *end || errno || !(v >= lo && v <= hi) ||
            (whole && v != (double)(uint64_t)v))
                return al_error(err, -EINVAL, NULL, "--%s: '%s' is not a %snumber from %g to %g",
                                opt, text ? text : "", whole ? "whole " : "", lo, hi);
        *ret = v;
        return 0;
}

/* Sets an option of the HTTP server or of sessions from its text (the
 * user's, or the table's default). */
/* The numeric options of airlock serve's HTTP side (bodies, runs, queues,
 * connections, times), each in its range. 1 when row is none of them. */
static int set_serve_number(serve_options *so, const cli_row *row, const char *val,
                            airlock_error *err)
{
        const char *n = row->name;
        double v = 0;
        int r = 0;
        switch (row->id) {
        case CLI_OPT_MAX_BODY:
                r = number(n, val, 1024, 1 << 30, true, &v, err);
                so->max_body = (uint64_t)v;
                break;
        case CLI_OPT_MAX_BODY_TOTAL:
                r = number(n, val, 65536, 16.0 * (1u << 30), true, &v, err);
                so->max_body_total = (uint64_t)v;
                break;
        case CLI_OPT_MAX_RUNS:
                r = number(n, val, 1, 32, true, &v, err);
                so->max_runs = (unsigned)v;
                break;
        case CLI_OPT_MAX_QUEUE:
                r = number(n, val, 0, 4096, true, &v, err);
                so->max_queue = (unsigned)v;
                break;
        case CLI_OPT_MAX_SESSIONS_PER_TOKEN:
                r = number(n, val, 0, 1024, true, &v, err);
                so->max_sessions_per_token = (unsigned)v;
                so->sessions_per_token_set = true;
                break;
        case CLI_OPT_MAX_RUNS_PER_TOKEN:
                r = number(n, val, 1, 32, true, &v, err);
                so->max_runs_per_token = (unsigned)v;
                so->runs_per_token_set = true;
                break;
        case CLI_OPT_MAX_QUEUE_PER_TOKEN:
                r = number(n, val, 0, 4096, true, &v, err);
                so->max_queue_per_token = (unsigned)v;
                so->queue_per_token_set = true;
                break;
        case CLI_OPT_QUEUE_WAIT:
                r = number(n, val, 0, 3600, false, &v, err);
                so->queue_wait_s = v;
                break;
        case CLI_OPT_MAX_CONNECTIONS:
                r = number(n, val, 1, 65536, true, &v, err);
                so->max_connections = (unsigned)v;
                break;
        case CLI_OPT_HTTP_TIMEOUT:
                r = number(n, val, 1, 3600, true, &v, err);
                so->http_timeout_s = (unsigned)v;
                break;
        case CLI_OPT_GRACE:
                r = number(n, val, 0, 86400, false, &v, err);
                so->grace_s = v;
                break;
        case CLI_OPT_PEER_TIMEOUT:
                r = number(n, val, 1, 86400, false, &v, err);
                so->peer_timeout_s = v;
                break;
        default:
                return 1;
        }
        return r;
}

/* Whether text is a dotted IPv4 address; out then gets it with '-' for
 * each '.'. */
static bool instance_from_ipv4(const char *text, char *out, size_t size)
{
        struct in_addr a;
        if (strlen(text) >= size || inet_pton(AF_INET, text, &a) != 1)
                return false;
        size_t i = 0;
        for (; text[i]; i++)
                out[i] = text[i] == '.' ? '-' : text[i];
        out[i] = '\0';
        return true;
}

static int set_server_option(cli_options *o, const cli_row *row, const char *val,
                             airlock_error *err)
{
        serve_options *so = &o->serve;
        mcp_session_caps *caps = &o->caps;
        const char *n = row->name;
        double v = 0;
        int r = 0;
        switch (row->id) {
        case CLI_OPT_LISTEN:
                so->listen = val;
                break;
        case CLI_OPT_TOKENS:
                so->tokens_file = val;
                break;
        case CLI_OPT_METRICS_TOKEN:
                so->metrics_token_file = val;
                break;
        case CLI_OPT_AUTH_SERVER:
                so->auth_server = val;
                break;
        case CLI_OPT_RESOURCE_URL:
                so->resource_url = val;
                break;
        case CLI_OPT_ALLOW_ORIGIN:
                if (so->n_origins >= ARRAY_SIZE(so->origins))
                        return al_error(err, -EINVAL, NULL, "more than %zu --allow-origin",
                                        ARRAY_SIZE(so->origins));
                so->origins[so->n_origins++] = val;
                break;
        case CLI_OPT_INSECURE_NO_AUTH:
                so->insecure_no_auth = true;
                break;
        case CLI_OPT_SHARED_SERVERS:
                so->shared_servers = true;
                break;
        case CLI_OPT_PEER_LISTEN:
                so->peer_listen = val;
                break;
        case CLI_OPT_PEERS:
                so->peers_file = val;
                break;
        case CLI_OPT_PEER_DNS:
                if (!serve_peer_domain_valid(val))
                        return al_error(err, -EINVAL, NULL,
                                        "--peer-dns: '%.80s' is not a DNS domain (letters, digits, "
                                        "'-' and '.', at most %d bytes)",
                                        val, SERVE_PEER_DOMAIN_MAX);
                so->peer_dns = val;
                break;
        case CLI_OPT_INSTANCE:
                /* An IPv4 address is taken with dashes for its dots: the
                 * name of a Kubernetes pod's DNS record (10-1-2-3.NAMESPACE
                 * .pod.cluster.local), which --peer-dns then finds, from
                 * --instance $(POD_IP). */
                if (instance_from_ipv4(val, so->instance, sizeof(so->instance)))
                        break;
                if (!mcp_instance_valid(val, strlen(val)))
                        return al_error(err, -EINVAL, NULL,
                                        "--instance: '%.64s' is not 1 to %d of a-z, 0-9 and '-'",
                                        val, MCP_INSTANCE_MAX);
                snprintf(so->instance, sizeof(so->instance), "%s", val);
                break;
        case CLI_OPT_MAX_SESSIONS:
                r = number(n, val, 0, 1024, true, &v, err);
                caps->max_sessions = (unsigned)v;
                break;
        case CLI_OPT_SESSION_IDLE:
                r = number(n, val, 1, 7 * 86400, false, &v, err);
                caps->idle_s = v;
                break;
        case CLI_OPT_SESSION_LIFETIME:
                r = number(n, val, 1, 30 * 86400, false, &v, err);
                caps->lifetime_s = v;
                break;
        case CLI_OPT_SESSION_MEMORY:
                r = number(n, val, 1, 1 << 20, true, &v, err);
                caps->max_memory = (uint64_t)v << 20;
                break;
        case CLI_OPT_TENANTS_DIR:
                if (!*val)
                        return al_error(err, -EINVAL, NULL, "--tenants-dir: an empty path");
                o->tenants_dir = val;
                break;
        case CLI_OPT_TENANT:
                if (!tenant_name_valid(val, strlen(val)))
                        return al_error(err, -EINVAL, NULL,
                                        "--tenant: '%.80s' is not a tenant name (1 to %d of A-Z, "
                                        "a-z, 0-9, '.', '_' and '-', starting with a letter or "
                                        "digit)",
                                        val, TENANT_NAME_MAX);
                o->tenant = val;
                break;
        case CLI_OPT_WORKSPACE_MAX_FILES:
                r = number(n, val, 0, 1000000, true, &v, err);
                o->ws_max_files = (uint64_t)v;
                break;
        case CLI_OPT_WORKSPACE_MAX_BYTES:
                r = number(n, val, 0, (double)(1ull << 40), true, &v, err);
                o->ws_max_bytes = (uint64_t)v;
                break;
        default:
                return set_serve_number(so, row, val, err); /* 1: not a server option */
        }
        return r;
}

/* A quota not given: half the cap with tokens (several clients), rounded
 * up; the whole cap without (one client). Never above the cap. */
static unsigned quota_default(bool set, unsigned given, unsigned cap, bool tokens)
{
        unsigned q = set ? given : tokens ? (cap + 1) / 2 : cap;
        return q < cap ? q : cap;
}

void serve_quota_defaults(serve_options *o, unsigned max_sessions)
{
        bool tokens = o->tokens_file != NULL;
        o->max_sessions_per_token = quota_default(o->sessions_per_token_set,
                                                  o->max_sessions_per_token, max_sessions, tokens);
        o->max_runs_per_token =
            quota_default(o->runs_per_token_set, o->max_runs_per_token, o->max_runs, tokens);
        o->max_queue_per_token =
            quota_default(o->queue_per_token_set, o->max_queue_per_token, o->max_queue, tokens);
}

/* The defaults of the server and session options: the table's own text,
 * parsed as the user's would be, and a random instance name, so that two
 * instances started without --instance never share one. */
static void server_defaults(cli_options *o)
{
        airlock_error err;
        for (size_t i = 0; i < ARRAY_SIZE(rows); i++)
                if (rows[i].dflt &&
                    (rows[i].group == CLI_G_SERVE || rows[i].group == CLI_G_SESSION ||
                     rows[i].group == CLI_G_SERVERS))
                        (void)set_server_option(o, &rows[i], rows[i].dflt, &err);
        unsigned char rnd[4];
        static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
                memset(rnd, 0, sizeof(rnd));
        size_t n = 0;
        o->serve.instance[n++] = 'i';
        for (size_t i = 0; i < sizeof(rnd); i++) {
                o->serve.instance[n++] = digits[rnd[i] % 36];
                o->serve.instance[n++] = digits[(rnd[i] / 36) % 36];
        }
        o->serve.instance[n] = '\0';
}

/* The getopt tables of cmd: its rows and, for every command, the limits'
 * options after --tools. */
static void build_getopt(cli_command cmd, struct option *longs, char *shorts)
{
        size_t n = 0, k = 0;
        /* '+': stop at the first argument that is not an option (FILE);
         * ':': a missing value is ':', an unknown option '?'. */
        shorts[k++] = '+';
        shorts[k++] = ':';
        for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
                const cli_row *r = &rows[i];
                if (!(r->commands & cmd))
                        continue;
                if (r->name)
                        longs[n++] =
                            (struct option){r->name, r->arg ? required_argument : no_argument, NULL,
                                            CLI_OPT_BASE + (int)r->id};
                if (r->short_opt) {
                        shorts[k++] = r->short_opt;
                        if (r->arg)
                                shorts[k++] = ':';
                }
                if (r->id == CLI_OPT_TOOLS) {
                        const airlock_limit_option *lo;
                        for (size_t j = 0;
                             j < CLI_MAX_LIMIT_OPTIONS && (lo = airlock_limit_option_at(j)); j++)
                                longs[n++] = (struct option){lo->name, required_argument, NULL,
                                                             CLI_OPT_LIMIT + (int)j};
                }
        }
        longs[n] = (struct option){NULL, 0, NULL, 0};
        shorts[k] = '\0';
}

/* The message for an option that cmd does not take: another command's,
 * or none at all. */
static int unknown_option(cli_command cmd, const char *arg, airlock_error *err)
{
        const char *name = command_name(cmd);
        const cli_row *r = row_named(arg);
        if (r) {
                char cmds[64];
                row_commands(r, cmds, sizeof(cmds));
                return al_error(err, -EINVAL, NULL,
                                "%.*s is not an option of airlock %s (it is one of: %s); airlock "
                                "%s --help lists the options",
                                (int)strcspn(arg, "="), arg, name, cmds, name);
        }
        return al_error(err, -EINVAL, NULL,
                        "unknown option '%.200s'; airlock %s --help lists the options", arg, name);
}

/* The options that build the sandbox's configuration and that every
 * command takes (the workspace, mounts, the allow-list, preloads, Python
 * paths, upstream servers, approval, figures, a writable /input, secrets),
 * into o->cfg (the --tools files wait for the limits: cli_parse_options). 1 when id is none of
 * them. */
static int set_config_option(cli_options *o, int id, const char *arg, airlock_error *err)
{
        int r = 0;
        switch (id) {
        case CLI_OPT_WORKSPACE: {
                o->has_workspace = true;
                /* Said here, where it is known to be the
                 * workspace: staging names only the path. */
                struct stat st;
                int e = stat(arg, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
                if (e)
                        r = al_error(err, -e, arg,
                                     "-w/--workspace %s: %s (the workspace is a folder, "
                                     "staged under /input)",
                                     arg, strerror(e));
                else
                        r = airlock_config_set_workspace(o->cfg, arg, err);
                break;
        }
        case CLI_OPT_MOUNT:
                r = add_mount(o->cfg, arg, err);
                break;
        case CLI_OPT_ALLOW_DOMAIN:
                r = add_allow(o->cfg, arg, err);
                break;
        case CLI_OPT_PRELOAD:
                r = add_preloads(o->cfg, arg, err);
                break;
        case CLI_OPT_PYTHON_PATH:
                r = airlock_config_add_python_path(o->cfg, arg, err);
                break;
        case CLI_OPT_SERVERS:
                o->has_servers = true;
                r = airlock_config_add_servers_file(o->cfg, arg, err);
                break;
        case CLI_OPT_APPROVAL:
                if (strcmp(arg, "never") == 0 || strcmp(arg, "never_require") == 0)
                        airlock_config_set_approval(o->cfg, AIRLOCK_APPROVAL_NEVER);
                else if (strcmp(arg, "always") == 0 || strcmp(arg, "always_require") == 0)
                        airlock_config_set_approval(o->cfg, AIRLOCK_APPROVAL_ALWAYS);
                else
                        r = al_error(err, -EINVAL, NULL,
                                     "--approval: '%s' is not 'never' or 'always'", arg);
                break;
        case CLI_OPT_NO_AUTO_FIGURES:
                airlock_config_set_auto_figures(o->cfg, false);
                break;
        case CLI_OPT_INPUT_WRITABLE:
                airlock_config_set_input_writable(o->cfg, true);
                break;
        case CLI_OPT_SECRET:
                r = add_secret(o->cfg, arg, err);
                break;
        default:
                return 1;
        }
        return r;
}

/* What follows the options: FILE and the code's arguments for run (as
 * python3 takes them), nothing for the other commands; and the options
 * that cannot go together. */
static int take_arguments(cli_options *o, int argc, char **argv, cli_command cmd,
                          airlock_error *err)
{
        int r;
        if (optind < argc) {
                if (cmd != CLI_RUN) {
                        r = al_error(err, -EINVAL, NULL,
                                     "unexpected argument '%.200s'; airlock %s --help lists the "
                                     "options",
                                     argv[optind], command_name(cmd));
                        return r;
                }
                /* As python3 takes them: the arguments after FILE, or
                 * after -c CODE, are the code's sys.argv[1:]. */
                if (!o->code)
                        o->file = argv[optind++];
                o->args = argv + optind;
                o->n_args = argc - optind;
        }
        if (o->tenants_dir && o->has_workspace) {
                /* Each tenant's workspace is its folder: one workspace for
                 * every tenant would be the very sharing tenants exist to
                 * prevent. Files all tenants share go in with --mount. */
                r = al_error(err, -EINVAL, NULL,
                             "--tenants-dir and --workspace cannot be given together: with "
                             "--tenants-dir each tenant's workspace is DIR/TENANT (use --mount "
                             "for files every tenant shares)");
                return r;
        }
        return 0;
}

int cli_parse_options(int argc, char **argv, cli_command cmd, cli_options *ret, airlock_error *err)
{
        cli_options o = {0};
        server_defaults(&o);
        airlock_limits lim;
        /* Every --tools file, loaded in order once the limits are known;
         * their tools add up. */
        const char *tools_files[CLI_MAX_TOOLS_FILES];
        size_t n_tools_files = 0;
        int r = airlock_config_new(&o.cfg, err);
        if (r < 0)
                return r;
        airlock_config_get_limits(o.cfg, &lim);

        struct option long_options[ARRAY_SIZE(rows) + CLI_MAX_LIMIT_OPTIONS + 1];
        char shortopts[2 * ARRAY_SIZE(rows) + 3];
        build_getopt(cmd, long_options, shortopts);
        /* 0, not 1: glibc then also forgets its position inside a bundle
         * of short options left by an earlier parse. */
        optind = 0;
        opterr = 0;
        int c;
        while ((c = getopt_long(argc, argv, shortopts, long_options, NULL)) != -1) {
                r = 0;
                /* A long option is its row's id above CLI_OPT_BASE, a
                 * short one its letter; ':' and '?' are getopt's own. */
                int id = c >= CLI_OPT_LIMIT ? c : c >= CLI_OPT_BASE ? c - CLI_OPT_BASE : -c;
                for (size_t i = 0; c > 0 && c < CLI_OPT_BASE && i < ARRAY_SIZE(rows); i++)
                        if (rows[i].short_opt == c)
                                id = (int)rows[i].id;
                const cli_row *row = id >= 0 && id < CLI_OPT_LIMIT ? row_of(id) : NULL;
                switch (id) {
                case CLI_OPT_TOOLS:
                        if (n_tools_files >= CLI_MAX_TOOLS_FILES)
                                r = al_error(err, -E2BIG, optarg,
                                             "more than %d --tools files (at %s)",
                                             CLI_MAX_TOOLS_FILES, optarg);
                        else
                                tools_files[n_tools_files++] = optarg;
                        break;
                case CLI_OPT_AUDIT:
                        o.audit = optarg;
                        break;
                case CLI_OPT_JSON:
                        o.json = true;
                        break;
                case CLI_OPT_OUTPUT_DIR:
                        o.output_dir = optarg;
                        break;
                case CLI_OPT_CODE:
                        o.code = optarg;
                        break;
                case CLI_OPT_YES:
                        o.yes = true;
                        break;
                /* The tracer's options are the process's (trace.h): set once
                 * here, and a reload may only turn them on. */
                case CLI_OPT_TRACE_CONTENT:
                        al_trace_set_content(true);
                        break;
                case CLI_OPT_TRACE_TENANTS:
                        al_trace_set_tenants(true);
                        break;
                case CLI_OPT_HELP:
                        cli_options_free(&o);
                        return 1;
                case -':':
                        r = al_error(err, -EINVAL, NULL,
                                     "option %s needs a value; airlock %s --help lists the options",
                                     argv[optind - 1], command_name(cmd));
                        break;
                case -'?':
                        r = unknown_option(cmd, argv[optind - 1], err);
                        break;
                default:
                        r = set_config_option(&o, id, optarg, err);
                        if (r <= 0)
                                break;
                        r = 0;
                        /* A limit: the value is the library's to read, which
                         * knows each limit's unit and range. */
                        if (id >= CLI_OPT_LIMIT) {
                                const airlock_limit_option *lo =
                                    airlock_limit_option_at((size_t)(id - CLI_OPT_LIMIT));
                                r = airlock_limits_set_option(&lim, lo->name, optarg, err);
                                break;
                        }
                        r = row ? set_server_option(&o, row, optarg, err) : 1;
                        if (r > 0)
                                r = unknown_option(cmd, argv[optind - 1], err);
                        break;
                }
                if (r < 0) {
                        cli_options_free(&o);
                        return r;
                }
        }
        r = take_arguments(&o, argc, argv, cmd, err);
        if (r < 0) {
                cli_options_free(&o);
                return r;
        }
        /* Limits first, so the tools file sees the configured default timeout. */
        r = airlock_config_set_limits(o.cfg, &lim, err);
        for (size_t i = 0; r >= 0 && i < n_tools_files; i++)
                r = airlock_config_load_tools(o.cfg, tools_files[i], err);
        if (r < 0) {
                cli_options_free(&o);
                return r;
        }
        *ret = o;
        return 0;
}

/* ---- the table for other readers ---------------------------------------- */

/* Text for roff: a leading '.' or '\'' would be a request, '\\' and '-'
 * have meanings of their own. */
static void roff_text(FILE *f, const char *s)
{
        if (*s == '.' || *s == '\'')
                fputs("\\&", f);
        for (; *s; s++) {
                if (*s == '\\')
                        fputs("\\e", f);
                else if (*s == '-')
                        fputs("\\-", f);
                else
                        fputc(*s, f);
        }
}

/* text (the row's Markdown inline form) as roff: `code` loses its marks. */
static void roff_plain(FILE *f, const char *text)
{
        _cleanup_free_ char *plain = strdup(text);
        if (!plain)
                return;
        char *o = plain;
        for (const char *p = text; *p; p++)
                if (*p != '`')
                        *o++ = *p;
        *o = '\0';
        roff_text(f, plain);
}

static void man_option(FILE *f, const char *left, const char *help, const char *dflt,
                       const char *text)
{
        fputs(".TP\n.B ", f);
        while (*left == ' ')
                left++;
        roff_text(f, left);
        fputs("\n", f);
        roff_text(f, help);
        if (dflt && *dflt) {
                fputs(" (default: ", f);
                roff_text(f, dflt);
                fputs(")", f);
        }
        fputs(".\n", f);
        if (text) {
                roff_plain(f, text);
                fputs("\n", f);
        }
}

void cli_print_man(FILE *f)
{
        fprintf(f, ".TH AIRLOCK 1 \"\" \"airlock %s\" \"User Commands\"\n", AIRLOCK_VERSION);
        fputs(".SH NAME\nairlock \\- run untrusted Python (an AI agent's code) in a Linux "
              "sandbox\n.SH SYNOPSIS\n",
              f);
        for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
                fprintf(f, ".B airlock %s\n", commands[i].name);
                roff_text(f, commands[i].args);
                fputs("\n.br\n", f);
        }
        fputs(".B airlock version\n.SH DESCRIPTION\n"
              "airlock stages a workspace read-only at /input, runs Python in a namespaced, "
              "seccomp-filtered, resource-limited sandbox with an embedded CPython, lets it call "
              "the host's tools and allow-listed HTTP targets, and returns its output and the "
              "files it wrote to /output. docs/design.md in the source holds every contract.\n",
              f);
        for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
                fputs(".SH AIRLOCK ", f);
                for (const char *c = commands[i].name; *c; c++)
                        fputc(*c - 'a' + 'A', f);
                fputs("\n", f);
                roff_text(f, commands[i].what);
                fputs(".\n", f);
                for (size_t k = 0; k < ARRAY_SIZE(rows); k++) {
                        const cli_row *r = &rows[k];
                        if (!(r->commands & commands[i].cmd) || r->group == CLI_G_CONFIG ||
                            r->id == CLI_OPT_HELP)
                                continue;
                        char left[128];
                        row_left(r, left, sizeof(left));
                        man_option(f, left, r->help, r->dflt, r->text);
                }
                if (commands[i].cmd == CLI_SERVE || commands[i].cmd == CLI_RUN) {
                        fputs(".PP\n", f);
                        roff_text(f, commands[i].cmd == CLI_SERVE ? serve_notes : run_notes);
                }
                fputs(".PP\nAnd every option of CONFIGURATION below.\n", f);
        }
        fputs(".SH CONFIGURATION\nThe options every command takes: what the sandbox holds and "
              "may do.\n",
              f);
        airlock_limits defaults;
        airlock_limits_default(&defaults);
        for (size_t k = 0; k < ARRAY_SIZE(rows); k++) {
                const cli_row *r = &rows[k];
                if (r->group != CLI_G_CONFIG && r->id != CLI_OPT_HELP)
                        continue;
                char left[128];
                row_left(r, left, sizeof(left));
                man_option(f, left, r->help, r->dflt, r->text);
                if (r->id != CLI_OPT_TOOLS)
                        continue;
                const airlock_limit_option *lo;
                for (size_t j = 0; j < CLI_MAX_LIMIT_OPTIONS && (lo = airlock_limit_option_at(j));
                     j++) {
                        char l[64], d[32];
                        snprintf(l, sizeof(l), "--%s %s", lo->name, lo->unit);
                        if (airlock_limits_format_option(&defaults, lo->name, d, sizeof(d)) < 0)
                                d[0] = '\0';
                        man_option(f, l, lo->help, d, NULL);
                }
        }
        fputs(".SH EXIT STATUS\n0: the run succeeded (or the server ended cleanly); 1: the code "
              "failed; 2: bad input or configuration; 3: the sandbox could not be set up.\n"
              ".SH SEE ALSO\n.BR bwrap (1),\n.BR unshare (1)\n",
              f);
}

/* A Markdown table cell: '|' would end it. */
static void md_cell(FILE *f, const char *s)
{
        for (; *s; s++) {
                if (*s == '|')
                        fputc('\\', f);
                fputc(*s, f);
        }
}

void cli_print_markdown(FILE *f)
{
        fputs("<!-- Written by `airlock help --markdown` from src/cli/option_table.h and the "
              "limits table; `make docs` writes it again, and the install tier checks that it "
              "is current. -->\n# Command-line options\n\n"
              "| option | commands | default | what it does |\n|---|---|---|---|\n",
              f);
        airlock_limits defaults;
        airlock_limits_default(&defaults);
        for (size_t k = 0; k < ARRAY_SIZE(rows); k++) {
                const cli_row *r = &rows[k];
                char left[128], cmds[64];
                row_left(r, left, sizeof(left));
                row_commands(r, cmds, sizeof(cmds));
                const char *l = left;
                while (*l == ' ')
                        l++;
                fputs("| `", f);
                md_cell(f, l);
                fputs("` | ", f);
                md_cell(f, r->commands == CLI_ALL ? "all" : cmds);
                fputs(" | ", f);
                md_cell(f, r->dflt ? r->dflt : "");
                fputs(" | ", f);
                md_cell(f, r->help);
                fputs(" |\n", f);
                if (r->id != CLI_OPT_TOOLS)
                        continue;
                const airlock_limit_option *lo;
                for (size_t j = 0; j < CLI_MAX_LIMIT_OPTIONS && (lo = airlock_limit_option_at(j));
                     j++) {
                        char d[32];
                        if (airlock_limits_format_option(&defaults, lo->name, d, sizeof(d)) < 0)
                                d[0] = '\0';
                        fprintf(f, "| `--%s %s` | all | %s | ", lo->name, lo->unit, d);
                        md_cell(f, lo->help);
                        fputs(" |\n", f);
                }
        }
        fputs("\n## What each option does\n\nBeyond its line above, in the words of its row of "
              "the option table (the man page has the same paragraphs).\n",
              f);
        for (size_t k = 0; k < ARRAY_SIZE(rows); k++) {
                const cli_row *r = &rows[k];
                if (!r->text)
                        continue;
                char left[128];
                row_left(r, left, sizeof(left));
                const char *l = left;
                while (*l == ' ')
                        l++;
                fprintf(f, "\n### `%s`\n\n%s\n", l, r->text);
        }
}

void cli_print_bash(FILE *f)
{
        fputs("# bash completion for airlock, written by `airlock help --bash`\n"
              "_airlock() {\n"
              "    local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} opts\n"
              "    if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
              "        COMPREPLY=($(compgen -W 'run mcp serve describe repl kernel version help' "
              "-- \"$cur\"))\n"
              "        return\n"
              "    fi\n"
              "    case $cmd in\n",
              f);
        for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
                fprintf(f, "    %s) opts='", commands[i].name);
                for (size_t k = 0; k < ARRAY_SIZE(rows); k++) {
                        const cli_row *r = &rows[k];
                        if (!(r->commands & commands[i].cmd) || !r->name)
                                continue;
                        fprintf(f, "--%s ", r->name);
                        if (r->id != CLI_OPT_TOOLS)
                                continue;
                        const airlock_limit_option *lo;
                        for (size_t j = 0;
                             j < CLI_MAX_LIMIT_OPTIONS && (lo = airlock_limit_option_at(j)); j++)
                                fprintf(f, "--%s ", lo->name);
                }
                fputs("' ;;\n", f);
        }
        fputs("    *) return ;;\n"
              "    esac\n"
              "    if [[ $cur == -* ]]; then\n"
              "        COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
              "    else\n"
              "        COMPREPLY=($(compgen -f -- \"$cur\"))\n"
              "    fi\n"
              "}\n"
              "complete -F _airlock airlock\n",
              f);
}

int cli_exit_status(const airlock_error *err)
{
        switch (err->kind) {
        case AIRLOCK_ERROR_INPUT:
                return EXIT_USAGE;
        case AIRLOCK_ERROR_SANDBOX:
        case AIRLOCK_ERROR_RUN:
                return EXIT_SANDBOX;
        }
        return EXIT_SANDBOX;
}

void print_warnings(const char *warnings, const char *prefix)
{
        for (const char *p = warnings; p && *p;) {
                size_t n = strcspn(p, "\n");
                fprintf(stderr, "%s: warning: %.*s\n", prefix, (int)n, p);
                p += n + (p[n] == '\n');
        }
}

void cli_options_free(cli_options *o)
{
        airlock_config_free(o->cfg);
        o->cfg = NULL;
}
