/* airlock kernel install: writes a kernelspec (Jupyter's kernel.json) whose
 * argv starts this program as `airlock kernel -f {connection_file}` with
 * the sandbox's options given to install. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"
#include "cli.h"

/* The options whose value is a host path: made absolute, since Jupyter
 * starts the kernel in the notebook's folder. --mount's HOST is the part
 * before the first ':'. */
static bool path_option(const char *a, bool *mount)
{
        static const char *const names[] = {
            "-w", "--workspace", "-t", "--tools", "--python-path", "--servers", "-m", "--mount"};
        for (size_t i = 0; i < ARRAY_SIZE(names); i++)
                if (strcmp(a, names[i]) == 0) {
                        *mount = i >= 6;
                        return true;
                }
        return false;
}

static json_t *absolute(const char *value, bool mount)
{
        if (value[0] == '/')
                return json_string(value);
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd)))
                return json_string(value);
        (void)mount; /* HOST[:PATH]: the prefix makes HOST absolute either way */
        char *out = NULL;
        if (asprintf(&out, "%s/%s", cwd, value) < 0)
                return NULL;
        json_t *j = json_string(out);
        free(out);
        return j;
}

static int mkdirs(char *path)
{
        for (char *p = path + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                int r = mkdir(path, 0755);
                *p = '/';
                if (r < 0 && errno != EEXIST)
                        return -errno;
        }
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

/* Jupyter's user data folder: $JUPYTER_DATA_DIR, else
 * $XDG_DATA_HOME/jupyter, else ~/.local/share/jupyter. */
static int user_data_dir(char *buf, size_t size)
{
        const char *d = getenv("JUPYTER_DATA_DIR");
        if (d && *d)
                return snprintf(buf, size, "%s", d) < (int)size ? 0 : -ENAMETOOLONG;
        const char *xdg = getenv("XDG_DATA_HOME");
        if (xdg && *xdg)
                return snprintf(buf, size, "%s/jupyter", xdg) < (int)size ? 0 : -ENAMETOOLONG;
        const char *home = getenv("HOME");
        if (!home || !*home)
                return -ENOENT;
        return snprintf(buf, size, "%s/.local/share/jupyter", home) < (int)size ? 0 : -ENAMETOOLONG;
}

/* The kernelspec's argv: this program's absolute path, `kernel -f
 * {connection_file}`, then the sandbox's options rest[1..n_rest), with the
 * host paths of the options that take one made absolute (Jupyter starts
 * the kernel in the notebook's folder). -errno when this program's path
 * cannot be read. */
static int spec_argv(char **rest, int n_rest, json_t **ret)
{
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0) {
                int e = n < 0 ? errno : ENAMETOOLONG;
                fprintf(stderr, "airlock kernel install: cannot find this program's path: %s\n",
                        strerror(e));
                return -e;
        }
        self[n] = '\0';
        json_t *args = json_pack("[s, s, s, s]", self, "kernel", "-f", "{connection_file}");
        for (int i = 1; i < n_rest; i++) {
                const char *a = rest[i];
                bool mount = false;
                const char *eq = strchr(a, '=');
                if (a[0] == '-' && a[1] == '-' && eq) {
                        char opt[64];
                        snprintf(opt, sizeof(opt), "%.*s", (int)(eq - a), a);
                        if (path_option(opt, &mount)) {
                                json_array_append_new(args, json_string(opt));
                                json_array_append_new(args, absolute(eq + 1, mount));
                                continue;
                        }
                }
                json_array_append_new(args, json_string(a));
                if (path_option(a, &mount) && i + 1 < n_rest)
                        json_array_append_new(args, absolute(rest[++i], mount));
        }
        *ret = args;
        return 0;
}

/* Writes spec as kernels/NAME/kernel.json under the prefix, or else the
 * user's Jupyter folder, through a temporary file and a rename. Returns
 * the command's exit status (it prints what went wrong). */
static int write_spec(json_t *spec, const char *prefix, const char *name)
{
        int r;
        char dir[PATH_MAX];
        int w;
        if (prefix) {
                w = snprintf(dir, sizeof(dir), "%s/share/jupyter/kernels/%s", prefix, name);
        } else {
                char base[PATH_MAX - 80];
                if (user_data_dir(base, sizeof(base)) < 0) {
                        fprintf(stderr, "airlock kernel install: no $HOME for --user; give "
                                        "--prefix DIR\n");
                        json_decref(spec);
                        return EXIT_USAGE;
                }
                w = snprintf(dir, sizeof(dir), "%s/kernels/%s", base, name);
        }
        if (w < 0 || (size_t)w >= sizeof(dir) - 16) {
                fprintf(stderr, "airlock kernel install: the kernelspec's path is too long\n");
                json_decref(spec);
                return EXIT_USAGE;
        }
        r = mkdirs(dir);
        char file[PATH_MAX + 16], tmp[PATH_MAX + 32];
        snprintf(file, sizeof(file), "%s/kernel.json", dir);
        snprintf(tmp, sizeof(tmp), "%s/.kernel.json.tmp", dir);
        if (r >= 0 && json_dump_file(spec, tmp, JSON_INDENT(1)) < 0)
                r = -EIO;
        if (r >= 0 && rename(tmp, file) < 0)
                r = -errno;
        json_decref(spec);
        if (r < 0) {
                fprintf(stderr, "airlock kernel install: cannot write %s: %s\n", file,
                        strerror(-r));
                unlink(tmp);
                return EXIT_USAGE;
        }
        printf("airlock kernel install: wrote %s\n", file);
        return EXIT_OK;
}

int kernel_install(int argc, char **argv)
{
        const char *prefix = NULL, *name = "airlock", *display = "Python (airlock)";
        bool user = false;
        /* install's own options out; the rest are the sandbox's. */
        char **rest = calloc((size_t)argc + 1, sizeof(char *));
        if (!rest)
                return EXIT_SANDBOX;
        int n_rest = 0;
        rest[n_rest++] = "kernel";
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i];
                const char **slot = strcmp(a, "--prefix") == 0         ? &prefix
                                    : strcmp(a, "--name") == 0         ? &name
                                    : strcmp(a, "--display-name") == 0 ? &display
                                                                       : NULL;
                if (slot) {
                        if (i + 1 >= argc) {
                                fprintf(stderr, "airlock kernel install: %s needs a value\n", a);
                                free(rest);
                                return EXIT_USAGE;
                        }
                        *slot = argv[++i];
                } else if (strcmp(a, "--user") == 0) {
                        user = true;
                } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
                        free(rest);
                        char *help[] = {"kernel", "--help", NULL};
                        return cmd_kernel(2, help);
                } else {
                        rest[n_rest++] = argv[i];
                }
        }
        rest[n_rest] = NULL;
        if (user && prefix) {
                fprintf(stderr, "airlock kernel install: --user and --prefix cannot be given "
                                "together\n");
                free(rest);
                return EXIT_USAGE;
        }
        if (!*name || strlen(name) > 64 ||
            strspn(name, "abcdefghijklmnopqrstuvwxyz"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(name)) {
                fprintf(stderr,
                        "airlock kernel install: --name '%s' is not 1 to 64 letters, "
                        "digits, '.', '_' or '-'\n",
                        name);
                free(rest);
                return EXIT_USAGE;
        }
        /* The sandbox's options are checked now, not at the kernel's start. */
        cli_options o;
        airlock_error err = {0};
        char **copy = calloc((size_t)n_rest + 1, sizeof(char *));
        if (!copy) {
                free(rest);
                return EXIT_SANDBOX;
        }
        memcpy(copy, rest, (size_t)n_rest * sizeof(char *));
        int r = cli_parse_options(n_rest, copy, CLI_KERNEL, &o, &err);
        free(copy);
        if (r == 0)
                cli_options_free(&o);
        if (r < 0) {
                fprintf(stderr, "airlock kernel install: %s\n", err.message);
                free(rest);
                return EXIT_USAGE;
        }
        json_t *args = NULL;
        r = spec_argv(rest, n_rest, &args);
        if (r < 0) {
                free(rest);
                return EXIT_SANDBOX;
        }
        free(rest);
        json_t *spec =
            json_pack("{s:o, s:s, s:s, s:s, s:{s:b}}", "argv", args, "display_name", display,
                      "language", "python", "interrupt_mode", "message", "metadata", "debugger", 0);
        return write_spec(spec, prefix, name);
}
