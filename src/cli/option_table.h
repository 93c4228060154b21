/* The command line's options, written once. Every command's --help, the
 * parser's getopt table and its unknown-option message, the man page
 * (airlock help --man), the shell completion (airlock help --bash) and the
 * options table of docs/options.md (airlock help --markdown) are generated from
 * it, so that an option cannot be added to one of them and forgotten in the
 * others. The limits' options are the library's (src/lib/config/limits.h,
 * through airlock_limit_option_at): they are listed with the configuration
 * options, after --tools.
 *
 * Columns of X(id, name, short, arg, commands, group, default, help):
 *   id        CLI_OPT_<id>, what the parser switches on
 *   name      the long option without "--", or NULL for a short option only
 *   short     its one-letter form, or 0
 *   arg       what its value is called in the help ("DIR", "N"), or NULL
 *             for an option that takes none
 *   commands  the commands that take it (CLI_RUN | CLI_MCP ...)
 *   group     the heading it is listed under (cli_group)
 *   default   its default as text, in the option's own unit, or NULL: the
 *             parser sets the default by parsing this text, so it is
 *             written nowhere else
 *   help      what it does, a few words for one line of --help
 */
#ifndef AIRLOCK_CLI_OPTION_TABLE_H
#define AIRLOCK_CLI_OPTION_TABLE_H

/* The commands, as bits: a row names every command that takes it. */
typedef enum cli_command {
        CLI_RUN = 1u << 0,
        CLI_MCP = 1u << 1,
        CLI_SERVE = 1u << 2,
        CLI_DESCRIBE = 1u << 3,
        CLI_REPL = 1u << 4,
        CLI_KERNEL = 1u << 5,
} cli_command;

#define CLI_ALL     (CLI_RUN | CLI_MCP | CLI_SERVE | CLI_DESCRIBE | CLI_REPL | CLI_KERNEL)
#define CLI_SERVERS (CLI_MCP | CLI_SERVE)

/* The headings of --help and of the man page, in their order. */
typedef enum cli_group {
        CLI_G_RUN,
        CLI_G_SERVE,
        CLI_G_SERVERS,
        CLI_G_SESSION,
        CLI_G_CONFIG,
        CLI_G_LAST,
} cli_group;

/* clang-format off */
#define CLI_OPTIONS(X)                                                                              \
        X(CODE, "code", 'c', "CODE", CLI_RUN, CLI_G_RUN, NULL, "the code to run")                  \
        X(JSON, "json", 0, NULL, CLI_RUN | CLI_DESCRIBE, CLI_G_RUN, NULL,                           \
          "print the result JSON, one document at the end (describe: the texts as JSON)")           \
        X(OUTPUT_DIR, "output-dir", 0, "DIR", CLI_RUN, CLI_G_RUN, NULL,                            \
          "also write the captured files to DIR: created if missing; "                              \
          "a file of the same name is replaced, other files are kept")                              \
        X(YES, "yes", 'y', NULL, CLI_RUN, CLI_G_RUN, NULL,                                          \
          "approve when approval is required (the code, and upstream tools' calls)")                \
        X(CONNECTION_FILE, "connection-file", 'f', "FILE", CLI_KERNEL, CLI_G_RUN, NULL,             \
          "the connection file Jupyter gives the kernel")                                          \
        X(KERNEL_USER, "user", 0, NULL, CLI_KERNEL, CLI_G_RUN, NULL,                                 \
          "install: into the user's Jupyter folder (the default)")                                 \
        X(KERNEL_PREFIX, "prefix", 0, "DIR", CLI_KERNEL, CLI_G_RUN, NULL,                            \
          "install: into DIR/share/jupyter/kernels")                                               \
        X(KERNEL_NAME, "name", 0, "NAME", CLI_KERNEL, CLI_G_RUN, "airlock",                          \
          "install: the kernelspec's name")                                                        \
        X(KERNEL_DISPLAY_NAME, "display-name", 0, "TEXT", CLI_KERNEL, CLI_G_RUN,                    \
          "Python (airlock)", "install: the name notebooks show")                                  \
        X(LISTEN, "listen", 0, "ADDR:PORT", CLI_SERVE, CLI_G_SERVE, "127.0.0.1:8080",               \
          "address to listen on; [::1]:PORT for IPv6")                                             \
        X(TOKENS, "tokens", 0, "FILE", CLI_SERVE, CLI_G_SERVE, NULL,                                \
          "bearer tokens, a line each: TOKEN [TENANT [KEY=VALUE...]]; reloaded on SIGHUP")                                        \
        X(METRICS_TOKEN, "metrics-token", 0, "FILE", CLI_SERVE, CLI_G_SERVE, NULL,                  \
          "a file holding the operator's token, the one /metrics takes (never a tenant's)")         \
        X(AUTH_SERVER, "authorization-server", 0, "URL", CLI_SERVE, CLI_G_SERVE, NULL,             \
          "named in the protected-resource metadata")                                               \
        X(RESOURCE_URL, "resource-url", 0, "URL", CLI_SERVE, CLI_G_SERVE, NULL,                    \
          "this server's public URL of /mcp")                                                       \
        X(ALLOW_ORIGIN, "allow-origin", 0, "ORIGIN", CLI_SERVE, CLI_G_SERVE, NULL,                 \
          "a browser Origin allowed (repeatable; others get 403)")                                  \
        X(INSECURE_NO_AUTH, "insecure-no-auth", 0, NULL, CLI_SERVE, CLI_G_SERVE, NULL,              \
          "serve a non-loopback address without --tokens")                                          \
        X(INSTANCE, "instance", 0, "ID", CLI_SERVE, CLI_G_SERVE, NULL,                              \
          "[a-z0-9-]{1,32}, named in session handles (default: random)")                            \
        X(MAX_BODY, "max-body", 0, "BYTES", CLI_SERVE, CLI_G_SERVE, "4194304",                      \
          "largest request body")                                                                   \
        X(MAX_BODY_TOTAL, "max-body-total", 0, "BYTES", CLI_SERVE, CLI_G_SERVE, "67108864",         \
          "request bodies held at once")                                                            \
        X(MAX_RUNS, "max-runs", 0, "N", CLI_SERVE, CLI_G_SERVE, "4", "tools/call running at once")  \
        X(MAX_QUEUE, "max-queue", 0, "N", CLI_SERVE, CLI_G_SERVE, "16",                             \
          "tools/call waiting for a run")                                                           \
        X(MAX_SESSIONS_PER_TOKEN, "max-sessions-per-token", 0, "N", CLI_SERVE, CLI_G_SERVE, NULL,   \
          "sessions one tenant may hold (default: half of --max-sessions with --tokens, else all)") \
        X(MAX_RUNS_PER_TOKEN, "max-runs-per-token", 0, "N", CLI_SERVE, CLI_G_SERVE, NULL,           \
          "tools/call of one tenant running at once (default: half of --max-runs with --tokens, "   \
          "else all)")                                                                              \
        X(MAX_QUEUE_PER_TOKEN, "max-queue-per-token", 0, "N", CLI_SERVE, CLI_G_SERVE, NULL,         \
          "tools/call of one tenant waiting for a run (default: half of --max-queue with "          \
          "--tokens, else all)")                                                                    \
        X(QUEUE_WAIT, "queue-wait", 0, "SEC", CLI_SERVE, CLI_G_SERVE, "30",                         \
          "longest wait for a run")                                                                 \
        X(MAX_CONNECTIONS, "max-connections", 0, "N", CLI_SERVE, CLI_G_SERVE, "256",                \
          "open connections")                                                                       \
        X(HTTP_TIMEOUT, "http-timeout", 0, "SEC", CLI_SERVE, CLI_G_SERVE, "30",                     \
          "idle connection closed after")                                                           \
        X(GRACE, "grace", 0, "SEC", CLI_SERVE, CLI_G_SERVE, "30",                                   \
          "on SIGTERM, calls may finish this long")                                                 \
        X(SHARED_SERVERS, "shared-servers", 0, NULL, CLI_SERVE, CLI_G_SERVE, NULL,                  \
          "with --tokens and --servers but no --tenants-dir: let every tenant share the servers")  \
        X(AUDIT, "audit", 0, "FILE", CLI_SERVERS, CLI_G_SERVERS, NULL,                              \
          "append one JSON line per call: what it used")                                            \
        X(TRACE_TENANTS, "trace-tenants", 0, NULL, CLI_SERVERS, CLI_G_SERVERS, NULL,                \
          "put the tenant's name in the trace's spans (docs/tracing.md)")                          \
        X(TRACE_CONTENT, "trace-content", 0, NULL, CLI_RUN | CLI_SERVERS | CLI_KERNEL, CLI_G_CONFIG, \
          NULL, "export the code and tools' arguments in the trace's spans, cut and scrubbed")     \
        X(TENANTS_DIR, "tenants-dir", 0, "DIR", CLI_SERVERS, CLI_G_SERVERS, NULL,                   \
          "each tenant's workspace is DIR/TENANT, its /input; adds the workspace tools")          \
        X(TENANT, "tenant", 0, "NAME", CLI_SERVERS, CLI_G_SERVERS, "default",                       \
          "the tenant of calls without a token (airlock mcp, or serve without --tokens)")          \
        X(WORKSPACE_MAX_FILES, "workspace-max-files", 0, "N", CLI_SERVERS, CLI_G_SERVERS, "10000",  \
          "files and folders of each tenant's workspace (the tokens file's max-files overrides)")  \
        X(WORKSPACE_MAX_BYTES, "workspace-max-bytes", 0, "BYTES", CLI_SERVERS, CLI_G_SERVERS,       \
          "268435456", "bytes of each tenant's workspace (the tokens file's max-bytes overrides)") \
        X(MAX_SESSIONS, "max-sessions", 0, "N", CLI_SERVERS, CLI_G_SESSION, "8",                    \
          "sessions open at once (0: no sessions)")                                                 \
        X(SESSION_IDLE, "session-idle", 0, "SEC", CLI_SERVERS, CLI_G_SESSION, "1800",               \
          "a session unused this long is closed")                                                   \
        X(SESSION_LIFETIME, "session-lifetime", 0, "SEC", CLI_SERVERS, CLI_G_SESSION, "28800",      \
          "a session this old is closed")                                                           \
        X(SESSION_MEMORY, "session-memory", 0, "MIB", CLI_SERVERS, CLI_G_SESSION, "2048",           \
          "memory a session may hold between cells")                                               \
        X(WORKSPACE, "workspace", 'w', "DIR", CLI_ALL, CLI_G_CONFIG, NULL,                          \
          "stage the contents of DIR under /input")                                                 \
        X(MOUNT, "mount", 'm', "HOST[:PATH]", CLI_ALL, CLI_G_CONFIG, NULL,                          \
          "stage HOST at /input/PATH (repeatable)")                                                 \
        X(ALLOW_DOMAIN, "allow-domain", 'a', "TARGET[=METHODS]", CLI_ALL, CLI_G_CONFIG, NULL,       \
          "allow outbound HTTP to TARGET (repeatable)")                                             \
        X(TOOLS, "tools", 't', "FILE", CLI_ALL, CLI_G_CONFIG, NULL,                                 \
          "host tools declared in JSON (repeatable)")                                               \
        X(PRELOAD, "preload", 0, "MOD[,MOD]", CLI_ALL, CLI_G_CONFIG, NULL,                          \
          "import modules once, before the snapshot")                                               \
        X(PYTHON_PATH, "python-path", 0, "DIR", CLI_ALL, CLI_G_CONFIG, NULL,                        \
          "make a folder of Python packages importable, read-only (repeatable)")                    \
        X(APPROVAL, "approval", 0, "never|always", CLI_ALL, CLI_G_CONFIG, "never",                  \
          "base approval mode of the host tools")                                                   \
        X(NO_AUTO_FIGURES, "no-auto-figures", 0, NULL, CLI_ALL, CLI_G_CONFIG, NULL,                 \
          "do not return matplotlib figures as PNG files")                                          \
        X(INPUT_WRITABLE, "input-writable", 0, NULL, CLI_ALL, CLI_G_CONFIG, NULL,                   \
          "/input writable per run; the result lists the changes")                                  \
        X(SECRET, "secret", 0, "NAME[+query][+body]=env:VAR|file:PATH@TARGET[=METHODS]...",        \
          CLI_ALL, CLI_G_CONFIG, NULL,                                                              \
          "a secret the guest sees only as airlock.secret(NAME)")                                   \
        X(SERVERS, "servers", 0, "FILE", CLI_ALL, CLI_G_CONFIG, NULL,                               \
          "MCP servers ({\"mcpServers\": ...}) whose tools the code imports: from servers "       \
          "import NAME (repeatable)")                                                               \
        X(HELP, "help", 'h', NULL, CLI_ALL, CLI_G_LAST, NULL, "print this help")
/* clang-format on */

#define CLI_OPT_ID(id, ...) CLI_OPT_##id,
typedef enum cli_option_id {
        CLI_OPTIONS(CLI_OPT_ID)
        /* getopt's value of a long option is CLI_OPT_BASE + its id (above
         * every short option's letter); the limit option i is
         * CLI_OPT_LIMIT + i. */
        CLI_OPT_BASE = 256,
        CLI_OPT_LIMIT = 1024,
} cli_option_id;
#undef CLI_OPT_ID

#endif
