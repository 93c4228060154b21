/* Option parsing shared by run, mcp and describe. Numbers are parsed strictly:
 * the whole text must be a number in range, or the option is refused with a
 * message naming it and its value. The limits' options, their units and
 * ranges are the library's (the limits table, through
 * airlock_limit_option_at and airlock_limits_set_option). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "base.h"

/* More --tools files than anyone writes by hand; the cap keeps the list on
 * the stack. */
#define CLI_MAX_TOOLS_FILES 64

/* The limits' options (airlock_limit_option_at) come from the library; the
 * cap keeps their getopt entries on the stack. */
#define CLI_MAX_LIMIT_OPTIONS 32

enum {
        OPT_PRELOAD = 256,
        OPT_PYTHON_PATH,
        OPT_APPROVAL,
        OPT_JSON,
        OPT_OUTPUT_DIR,
        OPT_NO_AUTO_FIGURES,
        OPT_INPUT_WRITABLE,
        OPT_SECRET,
        OPT_AUDIT,
        OPT_SERVERS,
        /* The limit option i is OPT_LIMIT + i. */
        OPT_LIMIT = 1024,
};

/* The options before the limits' options, and after them. */
static const struct option head_options[] = {
    {"workspace", required_argument, NULL, 'w'},
    {"mount", required_argument, NULL, 'm'},
    {"allow-domain", required_argument, NULL, 'a'},
    {"tools", required_argument, NULL, 't'},
};
static const struct option tail_options[] = {
    {"preload", required_argument, NULL, OPT_PRELOAD},
    {"python-path", required_argument, NULL, OPT_PYTHON_PATH},
    {"approval", required_argument, NULL, OPT_APPROVAL},
    {"no-auto-figures", no_argument, NULL, OPT_NO_AUTO_FIGURES},
    {"input-writable", no_argument, NULL, OPT_INPUT_WRITABLE},
    {"secret", required_argument, NULL, OPT_SECRET},
    {"servers", required_argument, NULL, OPT_SERVERS},
    {"audit", required_argument, NULL, OPT_AUDIT},
    {"json", no_argument, NULL, OPT_JSON},
    {"output-dir", required_argument, NULL, OPT_OUTPUT_DIR},
    {"yes", no_argument, NULL, 'y'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

void cli_usage(FILE *f)
{
        fputs("usage: airlock run [OPTIONS] [FILE]     run code once: FILE, -c CODE, or stdin\n"
              "       airlock mcp [OPTIONS]            serve execute_code over MCP on stdio\n"
              "         (sessions: --max-sessions N, --session-idle SEC, --session-lifetime SEC,\n"
              "          --session-memory MIB)\n"
              "       airlock serve [OPTIONS]          the same over MCP Streamable HTTP\n"
              "         (airlock serve --help for its options)\n"
              "       airlock describe [OPTIONS]       print the tool description (--json)\n"
              "       airlock repl [OPTIONS]           run cells from stdin in one session\n"
              "       airlock version\n"
              "\n"
              "options:\n"
              "  -w, --workspace DIR            stage the contents of DIR under /input\n"
              "  -m, --mount HOST[:PATH]        stage HOST at /input/PATH\n"
              "  -a, --allow-domain TARGET[=METHODS]  allow outbound HTTP to TARGET\n"
              "  -t, --tools FILE               host tools declared in JSON (repeatable)\n",
              f);
        /* One line per limit, with its default in the option's unit. */
        airlock_limits defaults;
        airlock_limits_default(&defaults);
        const airlock_limit_option *lo;
        for (size_t i = 0; i < CLI_MAX_LIMIT_OPTIONS && (lo = airlock_limit_option_at(i)); i++) {
                char left[64], dflt[32];
                snprintf(left, sizeof(left), "--%s %s", lo->name, lo->unit);
                if (airlock_limits_format_option(&defaults, lo->name, dflt, sizeof(dflt)) < 0)
                        dflt[0] = '\0';
                fprintf(f, "      %-27s%s (%s)\n", left, lo->help, dflt);
        }
        fputs("      --preload MOD[,MOD]        import modules once, before the snapshot\n"
              "      --python-path DIR          make a folder of Python packages importable,\n"
              "                                 read-only (repeatable)\n"
              "      --approval never|always    base approval mode\n"
              "      --no-auto-figures          do not return matplotlib figures as PNG files\n"
              "      --input-writable           /input writable per run; the result lists the\n"
              "                                 changes (the host's files are never written)\n"
              "      --secret NAME[+query][+body]=env:VAR|file:PATH@TARGET[=METHODS][@TARGET...]\n"
              "                                 a secret the guest sees as airlock.secret(NAME)\n"
              "                                 (airlock serve reads file: again on SIGHUP)\n"
              "      --servers FILE             MCP servers ({\"mcpServers\": ...}) whose tools\n"
              "                                 the code imports: from servers import NAME\n"
              "                                 (repeatable)\n"
              "mcp only:\n"
              "      --audit FILE               append one JSON line per call: what it used\n"
              "run only:\n"
              "  -c CODE                        the code to run\n"
              "      --json                     print the result JSON\n"
              "      --output-dir DIR           also write captured files to DIR\n"
              "  -y, --yes                      approve when approval is required (the code,\n"
              "                                 and the upstream tools' calls that need it)\n",
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

/* Fills opts (room for every head, limit and tail option) with the
 * options in the order of the usage text, and the terminating entry. */
static void build_long_options(struct option *opts)
{
        size_t n = 0;
        for (size_t i = 0; i < ARRAY_SIZE(head_options); i++)
                opts[n++] = head_options[i];
        const airlock_limit_option *lo;
        for (size_t i = 0; i < CLI_MAX_LIMIT_OPTIONS && (lo = airlock_limit_option_at(i)); i++)
                opts[n++] = (struct option){lo->name, required_argument, NULL, OPT_LIMIT + (int)i};
        for (size_t i = 0; i < ARRAY_SIZE(tail_options); i++)
                opts[n++] = tail_options[i];
}

int cli_parse_options(int argc, char **argv, cli_command cmd, cli_options *ret, airlock_error *err)
{
        cli_options o = {0};
        airlock_limits lim;
        /* Every --tools file, loaded in order once the limits are known;
         * their tools add up. */
        const char *tools_files[CLI_MAX_TOOLS_FILES];
        size_t n_tools_files = 0;
        int r = airlock_config_new(&o.cfg, err);
        if (r < 0)
                return r;
        airlock_config_get_limits(o.cfg, &lim);

        struct option long_options[ARRAY_SIZE(head_options) + CLI_MAX_LIMIT_OPTIONS +
                                   ARRAY_SIZE(tail_options)];
        build_long_options(long_options);
        const char *shortopts = cmd == CLI_RUN ? "+w:m:a:t:c:yh" : "+w:m:a:t:h";
        /* 0, not 1: glibc then also forgets its position inside a bundle
         * of short options left by an earlier parse. */
        optind = 0;
        opterr = 0;
        int c;
        while ((c = getopt_long(argc, argv, shortopts, long_options, NULL)) != -1) {
                r = 0;
                switch (c) {
                case 'w':
                        r = airlock_config_set_workspace(o.cfg, optarg, err);
                        break;
                case 'm':
                        r = add_mount(o.cfg, optarg, err);
                        break;
                case 'a':
                        r = add_allow(o.cfg, optarg, err);
                        break;
                case 't':
                        if (n_tools_files >= CLI_MAX_TOOLS_FILES)
                                r = al_error(err, -E2BIG, optarg,
                                             "more than %d --tools files (at %s)",
                                             CLI_MAX_TOOLS_FILES, optarg);
                        else
                                tools_files[n_tools_files++] = optarg;
                        break;
                case OPT_PRELOAD:
                        r = add_preloads(o.cfg, optarg, err);
                        break;
                case OPT_PYTHON_PATH:
                        r = airlock_config_add_python_path(o.cfg, optarg, err);
                        break;
                case OPT_SERVERS:
                        r = airlock_config_add_servers_file(o.cfg, optarg, err);
                        break;
                case OPT_APPROVAL:
                        if (strcmp(optarg, "never") == 0 || strcmp(optarg, "never_require") == 0)
                                airlock_config_set_approval(o.cfg, AIRLOCK_APPROVAL_NEVER);
                        else if (strcmp(optarg, "always") == 0 ||
                                 strcmp(optarg, "always_require") == 0)
                                airlock_config_set_approval(o.cfg, AIRLOCK_APPROVAL_ALWAYS);
                        else
                                r = al_error(err, -EINVAL, NULL,
                                             "--approval: '%s' is not 'never' or 'always'", optarg);
                        break;
                case OPT_NO_AUTO_FIGURES:
                        airlock_config_set_auto_figures(o.cfg, false);
                        break;
                case OPT_INPUT_WRITABLE:
                        airlock_config_set_input_writable(o.cfg, true);
                        break;
                case OPT_AUDIT:
                        if (cmd != CLI_MCP)
                                r = al_error(err, -EINVAL, NULL, "--audit is for mcp only");
                        o.audit = optarg;
                        break;
                case OPT_SECRET:
                        r = add_secret(o.cfg, optarg, err);
                        break;
                case OPT_JSON:
                        if (cmd == CLI_MCP)
                                r = al_error(err, -EINVAL, NULL, "--json is not an option of mcp");
                        o.json = true;
                        break;
                case OPT_OUTPUT_DIR:
                        if (cmd != CLI_RUN)
                                r = al_error(err, -EINVAL, NULL, "--output-dir is for run only");
                        o.output_dir = optarg;
                        break;
                case 'c':
                        o.code = optarg;
                        break;
                case 'y':
                        if (cmd != CLI_RUN)
                                r = al_error(err, -EINVAL, NULL, "--yes is for run only");
                        o.yes = true;
                        break;
                case 'h':
                        cli_options_free(&o);
                        return 1;
                case ':':
                        r = al_error(err, -EINVAL, NULL, "option %s needs a value",
                                     argv[optind - 1]);
                        break;
                default:
                        /* A limit: the value is the library's to read, which
                         * knows each limit's unit and range. */
                        if (c >= OPT_LIMIT) {
                                const airlock_limit_option *lo =
                                    airlock_limit_option_at((size_t)(c - OPT_LIMIT));
                                r = airlock_limits_set_option(&lim, lo->name, optarg, err);
                                break;
                        }
                        r = al_error(err, -EINVAL, NULL, "unknown option '%s'", argv[optind - 1]);
                        break;
                }
                if (r < 0) {
                        cli_options_free(&o);
                        return r;
                }
        }
        if (optind < argc) {
                if (cmd != CLI_RUN || argc - optind > 1 || o.code) {
                        r = al_error(err, -EINVAL, NULL, "unexpected argument '%s'", argv[optind]);
                        cli_options_free(&o);
                        return r;
                }
                o.file = argv[optind];
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
