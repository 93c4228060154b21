/* Option parsing shared by run, mcp and describe. Numbers are parsed strictly:
 * the whole text must be a number in range, or the option is refused with a
 * message naming it and its value. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/util.h"

/* More --tools files than anyone writes by hand; the cap keeps the list on
 * the stack. */
#define CLI_MAX_TOOLS_FILES 64

enum {
        OPT_TIMEOUT = 256,
        OPT_MEMORY,
        OPT_PIDS,
        OPT_MAX_OUTPUT_FILE,
        OPT_MAX_OUTPUT_TOTAL,
        OPT_MAX_OUTPUT_FILES,
        OPT_MAX_STDOUT,
        OPT_PRELOAD,
        OPT_PYTHON_PATH,
        OPT_APPROVAL,
        OPT_JSON,
        OPT_OUTPUT_DIR,
        OPT_NO_AUTO_FIGURES,
};

static const struct option long_options[] = {
    {"workspace", required_argument, NULL, 'w'},
    {"mount", required_argument, NULL, 'm'},
    {"allow-domain", required_argument, NULL, 'a'},
    {"tools", required_argument, NULL, 't'},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"memory", required_argument, NULL, OPT_MEMORY},
    {"pids", required_argument, NULL, OPT_PIDS},
    {"max-output-file", required_argument, NULL, OPT_MAX_OUTPUT_FILE},
    {"max-output-total", required_argument, NULL, OPT_MAX_OUTPUT_TOTAL},
    {"max-output-files", required_argument, NULL, OPT_MAX_OUTPUT_FILES},
    {"max-stdout", required_argument, NULL, OPT_MAX_STDOUT},
    {"preload", required_argument, NULL, OPT_PRELOAD},
    {"python-path", required_argument, NULL, OPT_PYTHON_PATH},
    {"approval", required_argument, NULL, OPT_APPROVAL},
    {"no-auto-figures", no_argument, NULL, OPT_NO_AUTO_FIGURES},
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
              "       airlock describe [OPTIONS]       print the tool description (--json)\n"
              "       airlock version\n"
              "\n"
              "options:\n"
              "  -w, --workspace DIR            stage the contents of DIR under /input\n"
              "  -m, --mount HOST[:PATH]        stage HOST at /input/PATH\n"
              "  -a, --allow-domain TARGET[=METHODS]  allow outbound HTTP to TARGET\n"
              "  -t, --tools FILE               host tools declared in JSON (repeatable)\n"
              "      --timeout SEC              wall-clock limit of one run (30)\n"
              "      --memory MIB               memory limit of one run (512)\n"
              "      --pids N                   process/thread limit (64)\n"
              "      --max-output-file MIB      capture cap per file (16)\n"
              "      --max-output-total MIB     capture cap in total (64)\n"
              "      --max-output-files N       capture cap on files (1000)\n"
              "      --max-stdout KIB           cap on each of stdout and stderr (1024)\n"
              "      --preload MOD[,MOD]        import modules once, before the snapshot\n"
              "      --python-path DIR          make a folder of Python packages importable,\n"
              "                                 read-only (repeatable)\n"
              "      --approval never|always    base approval mode\n"
              "      --no-auto-figures          do not return matplotlib figures as PNG files\n"
              "run only:\n"
              "  -c CODE                        the code to run\n"
              "      --json                     print the result JSON\n"
              "      --output-dir DIR           also write captured files to DIR\n"
              "  -y, --yes                      approve when approval is required\n",
              f);
}

static int parse_double(const char *opt, const char *s, double lo, double hi, double *ret,
                        airlock_error *err)
{
        char *end = NULL;
        errno = 0;
        double v = strtod(s, &end);
        if (!*s || errno || !end || *end || !isfinite(v) || v < lo || v > hi)
                return al_error(err, -EINVAL, NULL, "--%s: '%s' is not a number in [%g, %g]", opt,
                                s, lo, hi);
        *ret = v;
        return 0;
}

static int parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *ret,
                     airlock_error *err)
{
        char *end = NULL;
        errno = 0;
        if (!*s || *s == '-' || *s == '+')
                goto bad;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || !end || *end || v < lo || v > hi)
                goto bad;
        *ret = v;
        return 0;
bad:
        return al_error(err, -EINVAL, NULL, "--%s: '%s' is not a whole number in [%llu, %llu]", opt,
                        s, (unsigned long long)lo, (unsigned long long)hi);
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

        const char *shortopts = cmd == CLI_RUN ? "+w:m:a:t:c:yh" : "+w:m:a:t:h";
        /* 0, not 1: glibc then also forgets its position inside a bundle
         * of short options left by an earlier parse. */
        optind = 0;
        opterr = 0;
        int c;
        while ((c = getopt_long(argc, argv, shortopts, long_options, NULL)) != -1) {
                double d = 0;
                uint64_t u = 0;
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
                case OPT_TIMEOUT:
                        r = parse_double("timeout", optarg, 0.001, 86400, &d, err);
                        lim.timeout_s = d;
                        break;
                case OPT_MEMORY:
                        r = parse_u64("memory", optarg, 16, 1u << 20, &u, err);
                        lim.memory_bytes = u << 20;
                        break;
                case OPT_PIDS:
                        r = parse_u64("pids", optarg, 1, 65536, &u, err);
                        lim.pids = (uint32_t)u;
                        break;
                case OPT_MAX_OUTPUT_FILE:
                        r = parse_u64("max-output-file", optarg, 0, 1u << 20, &u, err);
                        lim.max_output_file = u << 20;
                        break;
                case OPT_MAX_OUTPUT_TOTAL:
                        r = parse_u64("max-output-total", optarg, 0, 1u << 20, &u, err);
                        lim.max_output_total = u << 20;
                        break;
                case OPT_MAX_OUTPUT_FILES:
                        r = parse_u64("max-output-files", optarg, 1, 1000000, &u, err);
                        lim.max_output_files = (uint32_t)u;
                        break;
                case OPT_MAX_STDOUT:
                        r = parse_u64("max-stdout", optarg, 1, 1u << 22, &u, err);
                        lim.max_stdout = u << 10;
                        break;
                case OPT_PRELOAD:
                        r = add_preloads(o.cfg, optarg, err);
                        break;
                case OPT_PYTHON_PATH:
                        r = airlock_config_add_python_path(o.cfg, optarg, err);
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
