/* The airlock command line: one file per command, sharing the option parser
 * (options.c) and its table (option_table.h). */
#ifndef AIRLOCK_CLI_H
#define AIRLOCK_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "airlock.h"
#include "option_table.h"
#include "serve.h"

typedef struct cli_options {
        airlock_config *cfg; /* built from the configuration options */
        const char *code;    /* run: -c CODE */
        const char *file;    /* run: FILE ("-" or NULL with no -c: standard input) */
        const char *output_dir;
        char **args; /* run: the arguments after FILE (or after the options with -c) */
        int n_args;
        bool json;
        bool yes;
        const char *audit;     /* mcp, serve: --audit FILE, or NULL */
        mcp_session_caps caps; /* mcp, serve: the session options */
        serve_options serve;   /* serve: the HTTP options */
        /* mcp, serve: --tenants-dir DIR (or NULL), --tenant NAME, and the
         * default caps of each tenant's workspace. */
        const char *tenants_dir;
        const char *tenant;
        uint64_t ws_max_files, ws_max_bytes;
        bool has_workspace; /* --workspace was given */
        bool has_servers;   /* --servers was given */
} cli_options;

/* Parses argv (argv[0] is the command name) into ret: the options of cmd
 * only (an option of another command is refused, naming the commands that
 * take it). Errors fill err and return < 0; --help returns 1 after
 * printing nothing (the caller prints cli_usage). */
int cli_parse_options(int argc, char **argv, cli_command cmd, cli_options *ret, airlock_error *err);
void cli_options_free(cli_options *o);
/* The --help of one command, and of airlock itself. */
void cli_usage(cli_command cmd, FILE *f);
void cli_usage_main(FILE *f);
/* The option table as a man page (roff), as the Markdown table of
 * docs/options.md, and as a bash completion script. */
void cli_print_man(FILE *f);
void cli_print_markdown(FILE *f);
void cli_print_bash(FILE *f);
/* Prints each line of warnings (NULL: none) as "PREFIX: warning: LINE". */
void print_warnings(const char *warnings, const char *prefix);

int cmd_run(int argc, char **argv);
int cmd_mcp(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_describe(int argc, char **argv);
int cmd_repl(int argc, char **argv);
int cmd_kernel(int argc, char **argv);
/* airlock kernel install (kernel_install.c), which cmd_kernel runs. */
int kernel_install(int argc, char **argv);

/* SIGTERM, SIGINT and SIGHUP of a long-running command (mcp, serve): from
 * now on each writes its number as one byte to a pipe, whose reading end
 * (non-blocking, close-on-exec) is returned, or -errno when no pipe could
 * be made (the signals then keep their default action). With restart,
 * system calls the signal interrupts are restarted (SA_RESTART). Call it
 * once, before any thread starts. */
int cli_signal_pipe(bool restart);

/* Exit status of every command, as docs/design.md. */
enum {
        EXIT_OK = 0,
        EXIT_CODE_FAILED = 1,
        EXIT_USAGE = 2,
        EXIT_SANDBOX = 3,
};

/* The exit status for a failed call of the library, from its error record
 * alone: EXIT_USAGE for bad input, configuration or staging, EXIT_SANDBOX
 * when the sandbox could not be started or a run could not be carried out.
 * The record is always the failed call's own (every public function clears
 * it on entry and every error fills all of it), so no caller has to clear
 * it first. */
int cli_exit_status(const airlock_error *err);

#endif
