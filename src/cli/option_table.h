/* The command line's options, written once. Every command's --help, the
 * parser's getopt table and its unknown-option message, the man page
 * (airlock help --man), the shell completion (airlock help --bash) and the
 * options table of docs/options.md (airlock help --markdown) are generated from
 * it, so that an option cannot be added to one of them and forgotten in the
 * others. The limits' options are the library's (src/lib/config/limits.h,
 * through airlock_limit_option_at): they are listed with the configuration
 * options, after --tools.
 *
 * Columns of X(id, name, short, arg, commands, group, default, help, text):
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
 *   text      what it does in full, or NULL when help says it all: the
 *             paragraph of the man page and of docs/options.md ("What each
 *             option does"), in Markdown's inline form (`code`), written
 *             nowhere else (docs/design.md keeps the rules common to all)
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
#define CLI_OPTIONS(X)                                                                               \
        X(CODE, "code", 'c', "CODE", CLI_RUN, CLI_G_RUN, NULL, "the code to run", NULL)              \
        X(JSON, "json", 0, NULL, CLI_RUN | CLI_DESCRIBE, CLI_G_RUN, NULL,                            \
          "print the result JSON, one document at the end (describe: the texts as JSON)",            \
          "Print the result JSON (docs/design.md, \"Result JSON\"), one document at the "            \
          "end; `describe --json` prints the texts as JSON.")                                        \
        X(OUTPUT_DIR, "output-dir", 0, "DIR", CLI_RUN, CLI_G_RUN, NULL,                              \
          "also write the captured files to DIR: created if missing; "                               \
          "a file of the same name is replaced, other files are kept",                               \
          "DIR is created when missing; a file the run writes replaces the file of that "            \
          "name, never written through and never followed if it is a link, and DIR's "               \
          "other files are kept, so the same command runs again into the same folder.")              \
        X(YES, "yes", 'y', NULL, CLI_RUN, CLI_G_RUN, NULL,                                           \
          "approve when approval is required (the code, and upstream tools' calls)",                 \
          "Approve when approval is required: the code and every upstream MCP tool call "            \
          "that needs it. Without it, on a terminal, the code is shown there and the "               \
          "answer asked for, with each character that could hide a part of it (C0 "                  \
          "controls but tab and newline, DEL, C1 controls, bidirectional marks, "                    \
          "embeddings, overrides and isolates) shown as `<U+XXXX>`, and so is each such "            \
          "call.")                                                                                   \
        X(CONNECTION_FILE, "connection-file", 'f', "FILE", CLI_KERNEL, CLI_G_RUN, NULL,              \
          "the connection file Jupyter gives the kernel", NULL)                                      \
        X(KERNEL_USER, "user", 0, NULL, CLI_KERNEL, CLI_G_RUN, NULL,                                 \
          "install: into the user's Jupyter folder (the default)", NULL)                             \
        X(KERNEL_PREFIX, "prefix", 0, "DIR", CLI_KERNEL, CLI_G_RUN, NULL,                            \
          "install: into DIR/share/jupyter/kernels", NULL)                                           \
        X(KERNEL_NAME, "name", 0, "NAME", CLI_KERNEL, CLI_G_RUN, "airlock",                          \
          "install: the kernelspec's name", NULL)                                                    \
        X(KERNEL_DISPLAY_NAME, "display-name", 0, "TEXT", CLI_KERNEL, CLI_G_RUN,                     \
          "Python (airlock)", "install: the name notebooks show", NULL)                              \
        X(LISTEN, "listen", 0, "ADDR:PORT", CLI_SERVE, CLI_G_SERVE, "127.0.0.1:8080",                \
          "address to listen on; [::1]:PORT for IPv6",                                               \
          "Numeric address; `[V6ADDR]:PORT` for IPv6; port 0 picks one (logged).")                   \
        X(TOKENS, "tokens", 0, "FILE", CLI_SERVE, CLI_G_SERVE, NULL,                                 \
          "bearer tokens, a line each: TOKEN [TENANT [KEY=VALUE...]]; reloaded on SIGHUP",           \
          "Bearer tokens and their tenants, a line each: `TOKEN [TENANT [KEY=VALUE ...]]` "          \
          "(docs/design.md, \"Tenants\"; blank lines and `#` lines skipped, at most 1024 "           \
          "tokens of at most 512 bytes, no blanks in a token); each compared in constant "           \
          "time, all always compared; reloaded on SIGHUP (a file that cannot be read or "            \
          "has a bad line keeps the old tokens).")                                                   \
        X(METRICS_TOKEN, "metrics-token", 0, "FILE", CLI_SERVE, CLI_G_SERVE, NULL,                   \
          "a file holding the operator's token, the one /metrics takes (never a tenant's)",          \
          "The operator's token, the first line of FILE (blanks around it dropped; one "             \
          "word of at most 512 bytes), the one `GET /metrics` takes: the totals are every "          \
          "tenant's, and with two tenants the totals less one's own figures are the "                \
          "other's. It must be no tenant's token (at start exit 2; a SIGHUP that would "             \
          "give it to a tenant keeps the old tokens); it calls no tool. Read again on "              \
          "SIGHUP (a file that cannot be read keeps the old token).")                                \
        X(AUTH_SERVER, "authorization-server", 0, "URL", CLI_SERVE, CLI_G_SERVE, NULL,               \
          "named in the protected-resource metadata",                                                \
          "Named in the metadata (no JWT is validated: tokens come from the file).")                 \
        X(RESOURCE_URL, "resource-url", 0, "URL", CLI_SERVE, CLI_G_SERVE, NULL,                      \
          "this server's public URL of /mcp",                                                        \
          "This server's public URL of `/mcp`, for the metadata and `WWW-Authenticate`. "            \
          "Default: from `Host`.")                                                                   \
        X(ALLOW_ORIGIN, "allow-origin", 0, "ORIGIN", CLI_SERVE, CLI_G_SERVE, NULL,                   \
          "a browser Origin allowed (repeatable; others get 403)",                                   \
          "A browser origin allowed (repeatable, 16); a request with any other `Origin` "            \
          "is 403, one without `Origin` is served. The server's own name is not trusted "            \
          "by itself (a DNS-rebinding page's origin matches the Host it reached).")                  \
        X(INSECURE_NO_AUTH, "insecure-no-auth", 0, NULL, CLI_SERVE, CLI_G_SERVE, NULL,               \
          "serve a non-loopback address without --tokens",                                           \
          "Serve a non-loopback address without `--tokens`; without it such a `--listen` "           \
          "exits 2.")                                                                                \
        X(INSTANCE, "instance", 0, "ID", CLI_SERVE, CLI_G_SERVE, NULL,                               \
          "[a-z0-9-]{1,32} (an IPv4 address: dots become dashes), named in session handles",         \
          "`[a-z0-9-]{1,32}`, named in session handles and `Airlock-Instance`; a dotted "            \
          "IPv4 address is taken with dashes for its dots (`10.1.2.3` is `10-1-2-3`, the "           \
          "label of a Kubernetes pod's DNS record, which `--peer-dns "                               \
          "NAMESPACE.pod.cluster.local` finds). Default: random `i` + 8.")                           \
        X(MAX_BODY, "max-body", 0, "BYTES", CLI_SERVE, CLI_G_SERVE, "4194304",                       \
          "largest request body",                                                                    \
          "Largest request body (1024 to 1 GiB).")                                                   \
        X(MAX_BODY_TOTAL, "max-body-total", 0, "BYTES", CLI_SERVE, CLI_G_SERVE, "67108864",          \
          "request bodies held at once",                                                             \
          "The bodies of all requests held at once and what they parse into (64 KiB to 16 "          \
          "GiB); a body that would pass it is read, dropped and answered 503 (413 when "             \
          "its parsed form alone passes it).")                                                       \
        X(MAX_RUNS, "max-runs", 0, "N", CLI_SERVE, CLI_G_SERVE, "4", "tools/call running at once",   \
          "`tools/call` holding a run slot at once (1 to 32).")                                      \
        X(MAX_QUEUE, "max-queue", 0, "N", CLI_SERVE, CLI_G_SERVE, "16",                              \
          "tools/call waiting for a run",                                                            \
          "`tools/call` waiting for a slot (0 to 4096); past it 429.")                               \
        X(MAX_SESSIONS_PER_TOKEN, "max-sessions-per-token", 0, "N", CLI_SERVE, CLI_G_SERVE, NULL,    \
          "sessions one tenant may hold (default: half of --max-sessions with --tokens, else all)",  \
          "Sessions (forks count) one tenant may hold open (0 to 1024; never above "                 \
          "`--max-sessions`); the tenants file's `max-sessions=` overrides it for a "                \
          "tenant. Default: half of `--max-sessions` with `--tokens`, else all of it.")              \
        X(MAX_RUNS_PER_TOKEN, "max-runs-per-token", 0, "N", CLI_SERVE, CLI_G_SERVE, NULL,            \
          "tools/call of one tenant running at once (default: half of --max-runs with --tokens, "    \
          "else all)",                                                                               \
          "One tenant's `tools/call` holding a run slot at once (1 to 32; never above "              \
          "`--max-runs`); a call past it waits in the queue, though a slot is free; "                \
          "`max-runs=` overrides. Default: half of `--max-runs` with `--tokens`, else "              \
          "all.")                                                                                    \
        X(MAX_QUEUE_PER_TOKEN, "max-queue-per-token", 0, "N", CLI_SERVE, CLI_G_SERVE, NULL,          \
          "tools/call of one tenant waiting for a run (default: half of --max-queue with "           \
          "--tokens, else all)",                                                                     \
          "One tenant's `tools/call` waiting (0 to 4096; never above `--max-queue`); past "          \
          "it 429; `max-queue=` overrides. Default: half of `--max-queue` with "                     \
          "`--tokens`, else all.")                                                                   \
        X(QUEUE_WAIT, "queue-wait", 0, "SEC", CLI_SERVE, CLI_G_SERVE, "30",                          \
          "longest wait for a run",                                                                  \
          "Longest wait for a slot; then 503.")                                                      \
        X(MAX_CONNECTIONS, "max-connections", 0, "N", CLI_SERVE, CLI_G_SERVE, "256",                 \
          "open connections",                                                                        \
          "Open connections (libmicrohttpd refuses more).")                                          \
        X(HTTP_TIMEOUT, "http-timeout", 0, "SEC", CLI_SERVE, CLI_G_SERVE, "30",                      \
          "idle connection closed after",                                                            \
          "A connection idle this long is closed (a stalled or slowloris client, one that "          \
          "does not read its answer).")                                                              \
        X(GRACE, "grace", 0, "SEC", CLI_SERVE, CLI_G_SERVE, "30",                                    \
          "on SIGTERM, calls may finish this long",                                                  \
          "On SIGTERM or SIGINT, calls may finish this long; the rest are cancelled.")               \
        X(SHARED_SERVERS, "shared-servers", 0, NULL, CLI_SERVE, CLI_G_SERVE, NULL,                   \
          "with --tokens and --servers but no --tenants-dir: let every tenant share the servers",    \
          "With `--tokens` and `--servers` but without `--tenants-dir`, every tenant's "             \
          "runs share the upstream servers' processes and their state (docs/design.md, "             \
          "\"Tenants\"); without it such a start exits 2.")                                          \
        X(PEER_LISTEN, "peer-listen", 0, "ADDR:PORT", CLI_SERVE, CLI_G_SERVE, NULL,                  \
          "the internal listener for calls peers forward (needs a secret @peer)",                    \
          "The internal listener on which peers forward their calls (`POST /peer/mcp`, "             \
          "docs/design.md, \"Peers\"); needs the cluster secret. Put it on an address only "        \
          "the cluster reaches.")                                                                    \
        X(PEERS, "peers", 0, "FILE", CLI_SERVE, CLI_G_SERVE, NULL,                                   \
          "peers, a line each: INSTANCE ADDR:PORT (reloaded on SIGHUP)",                             \
          "The peers, a line each: `INSTANCE ADDR:PORT` (numeric address, "                          \
          "`[V6ADDR]:PORT` for IPv6; blank lines and `#` comments skipped; at most 1024 "            \
          "lines of 256 bytes, an instance named once); reloaded on SIGHUP (a file that "            \
          "cannot be read or has a bad line keeps the old peers, named in the one line).")           \
        X(PEER_DNS, "peer-dns", 0, "DOMAIN", CLI_SERVE, CLI_G_SERVE, NULL,                           \
          "find a peer not in --peers at INSTANCE.DOMAIN, --peer-listen's port",                     \
          "A peer not in `--peers` is `INSTANCE.DOMAIN` at this instance's own "                     \
          "`--peer-listen` port (a headless Service's names; needs `--peer-listen`).")               \
        X(PEER_TIMEOUT, "peer-timeout", 0, "SEC", CLI_SERVE, CLI_G_SERVE, "30",                     \
          "margin over a forwarded call's own bound for its peer's answer",                          \
          "A forwarded call waits for its peer's whole answer at most its own bound (`--queue-wait` " \
          "plus `--timeout`, which the peer, configured alike, applies) plus this margin; a peer "   \
          "that hangs fails the call then. Connecting takes at most 3 s.")                           \
        X(AUDIT, "audit", 0, "FILE", CLI_SERVERS, CLI_G_SERVERS, NULL,                               \
          "append one JSON line per call: what it used",                                             \
          "Appends one JSON line per `tools/call` to FILE (created `0600`, opened with "             \
          "`O_APPEND`, never truncated, each line one `write`): `{\"time\" (RFC 3339, "              \
          "UTC), \"transport\": \"mcp\", \"call\" (the run id of its resource URIs, or "             \
          "null), \"session\", \"status\" (or `not run`), \"exit_code\", \"usage\"}`; "              \
          "never the code, its output, file contents or a secret (`src/mcp/audit.c`, "               \
          "shared with `airlock serve`).")                                                           \
        X(TRACE_TENANTS, "trace-tenants", 0, NULL, CLI_SERVERS, CLI_G_SERVERS, NULL,                 \
          "put the tenant's name in the trace's spans (docs/tracing.md)",                            \
          "Put the tenant's name in the spans of its calls (`airlock.tenant`; "                      \
          "docs/tracing.md). Without it no span names a tenant.")                                    \
        X(TRACE_CONTENT, "trace-content", 0, NULL, CLI_RUN | CLI_SERVERS | CLI_KERNEL, CLI_G_CONFIG,  \
          NULL, "export the code and tools' arguments in the trace's spans, cut and scrubbed",       \
          "Export the code and the tools' arguments in the spans (docs/tracing.md), each cut "       \
          "at 4096 bytes and scrubbed of every secret's value, for a developer's own "               \
          "machine; without it no code, argument, result or file content is exported.")              \
        X(TENANTS_DIR, "tenants-dir", 0, "DIR", CLI_SERVERS, CLI_G_SERVERS, NULL,                    \
          "each tenant's workspace is DIR/TENANT, its /input; adds the workspace tools",             \
          "Each tenant's workspace is `DIR/TENANT` (docs/design.md, \"Tenants\"); adds "             \
          "the workspace tools; also an option of `airlock mcp`, whose one tenant is "               \
          "`--tenant`. With `--workspace`: exit 2.")                                                 \
        X(TENANT, "tenant", 0, "NAME", CLI_SERVERS, CLI_G_SERVERS, "default",                        \
          "the tenant of calls without a token (airlock mcp, or serve without --tokens)",            \
          "The tenant of calls without a token (`airlock mcp`, or `airlock serve` without "          \
          "`--tokens`).")                                                                            \
        X(WORKSPACE_MAX_FILES, "workspace-max-files", 0, "N", CLI_SERVERS, CLI_G_SERVERS, "10000",   \
          "files and folders of each tenant's workspace (the tokens file's max-files overrides)",    \
          "Files and folders one tenant's workspace may hold (0 to 1,000,000); "                     \
          "`max-files=` overrides.")                                                                 \
        X(WORKSPACE_MAX_BYTES, "workspace-max-bytes", 0, "BYTES", CLI_SERVERS, CLI_G_SERVERS,        \
          "268435456", "bytes of each tenant's workspace (the tokens file's max-bytes overrides)",   \
          "Bytes of regular files one tenant's workspace may hold (0 to 1 TiB); "                    \
          "`max-bytes=` overrides.")                                                                 \
        X(MAX_SESSIONS, "max-sessions", 0, "N", CLI_SERVERS, CLI_G_SESSION, "8",                     \
          "sessions open at once (0: no sessions)", NULL)                                            \
        X(SESSION_IDLE, "session-idle", 0, "SEC", CLI_SERVERS, CLI_G_SESSION, "1800",                \
          "a session unused this long is closed", NULL)                                              \
        X(SESSION_LIFETIME, "session-lifetime", 0, "SEC", CLI_SERVERS, CLI_G_SESSION, "28800",       \
          "a session this old is closed", NULL)                                                      \
        X(SESSION_MEMORY, "session-memory", 0, "MIB", CLI_SERVERS, CLI_G_SESSION, "2048",            \
          "memory a session may hold between cells", NULL)                                           \
        X(WORKSPACE, "workspace", 'w', "DIR", CLI_ALL, CLI_G_CONFIG, NULL,                           \
          "stage the contents of DIR under /input", NULL)                                            \
        X(MOUNT, "mount", 'm', "HOST[:PATH]", CLI_ALL, CLI_G_CONFIG, NULL,                           \
          "stage HOST at /input/PATH (repeatable)",                                                  \
          "HOST is a file or a directory; without `:PATH` the path is HOST as given, "               \
          "normalised (repeatable).")                                                                \
        X(ALLOW_DOMAIN, "allow-domain", 'a', "TARGET[=METHODS]", CLI_ALL, CLI_G_CONFIG, NULL,        \
          "allow outbound HTTP to TARGET (repeatable)",                                              \
          "TARGET is `host`, `host:port`, or `scheme://host[:port][/path]`; METHODS "                \
          "comma-separated, default all (repeatable).")                                              \
        X(TOOLS, "tools", 't', "FILE", CLI_ALL, CLI_G_CONFIG, NULL,                                  \
          "host tools declared in JSON (repeatable)",                                                \
          "Host tools declared in JSON (docs/design.md, \"Tools file\"); repeatable: the "           \
          "tools of every file add up, and a tool name that two files declare is an error "          \
          "(exit 2) naming the tool and both files.")                                                \
        X(PRELOAD, "preload", 0, "MOD[,MOD]", CLI_ALL, CLI_G_CONFIG, NULL,                           \
          "import modules once, before the snapshot", NULL)                                          \
        X(PYTHON_PATH, "python-path", 0, "DIR", CLI_ALL, CLI_G_CONFIG, NULL,                         \
          "make a folder of Python packages importable, read-only (repeatable)",                     \
          "The folder is importable, read-only, at `/opt/airlock/pythonpath/N` "                     \
          "(repeatable; N counts from 0 in the order given).")                                       \
        X(APPROVAL, "approval", 0, "never|always", CLI_ALL, CLI_G_CONFIG, "never",                   \
          "base approval mode of the host tools", NULL)                                              \
        X(NO_AUTO_FIGURES, "no-auto-figures", 0, NULL, CLI_ALL, CLI_G_CONFIG, NULL,                  \
          "do not return matplotlib figures as PNG files",                                           \
          "matplotlib figures are not returned by themselves (docs/design.md, \"Inside "             \
          "the sandbox\").")                                                                         \
        X(INPUT_WRITABLE, "input-writable", 0, NULL, CLI_ALL, CLI_G_CONFIG, NULL,                    \
          "/input writable per run; the result lists the changes",                                   \
          "`/input` is writable, as a private overlay per run; the result lists what the "           \
          "run changed there (`input_changes`, docs/design.md, \"Result JSON\"); the "               \
          "host's files are never written (`airlock_config_set_input_writable`).")                   \
        X(SECRET, "secret", 0, "NAME[+query][+body]=env:VAR|file:PATH@TARGET[=METHODS]...",          \
          CLI_ALL, CLI_G_CONFIG, NULL,                                                               \
          "a secret the guest sees only as airlock.secret(NAME)",                                    \
          "A secret the guest sees only as a placeholder (`airlock.secret('NAME')`; "                \
          "docs/design.md, \"Secrets\"). Its source is `env:VAR` or `file:PATH` (one "               \
          "trailing newline dropped), never the value "                                              \
          "itself; the targets are in the allow-list's syntax (at most 16); `+query`, "              \
          "`+body` let the placeholder be replaced there too (repeatable; "                          \
          "`airlock_config_add_secret`).")                                                           \
        X(SERVERS, "servers", 0, "FILE", CLI_ALL, CLI_G_CONFIG, NULL,                                \
          "MCP servers ({\"mcpServers\": ...}) whose tools the code imports: from servers "          \
          "import NAME (repeatable)",                                                                \
          "MCP servers in the format MCP clients write (`{\"mcpServers\": ...}`), started "          \
          "on the host per sandbox; their tools are Python functions in the guest (`from "           \
          "servers import NAME`; docs/design.md, \"Upstream MCP servers (code mode)\"; "             \
          "repeatable; `airlock_config_add_servers_file`).")                                         \
        X(HELP, "help", 'h', NULL, CLI_ALL, CLI_G_LAST, NULL, "print this help", NULL)
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
