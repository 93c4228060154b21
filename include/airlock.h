/* airlock: run untrusted Python in a Linux sandbox, move files in and out safely.
 *
 * This header is the whole public API. The rules below hold for every
 * function in it unless its own comment says otherwise.
 *
 * Errors. Every function that can fail returns >= 0 on success or a
 * negative errno value, and fills the optional error record (err may be
 * NULL) with a message that names the path or value at fault. The library
 * never prints, exits or aborts on bad input.
 *
 * Out-parameters are named ret or ret_*. They are written only on success;
 * on failure they are left as they were.
 *
 * Ownership. What a function returns through ret (an object, a result, a
 * malloc'd string) belongs to the caller, who frees it with the matching
 * airlock_*_free or airlock_*_close, or free() for text. A const char *
 * return value belongs to the library and lives as long as the object it
 * came from (or forever, for names of constants). Strings and buffers the
 * caller passes in are copied when the library keeps them; the caller may
 * free them when the call returns.
 *
 * NULL. Free and close functions accept NULL and do nothing. Other object
 * arguments must not be NULL unless their comment says so (an options
 * pointer that may be NULL means "all defaults").
 *
 * Growable structs. A struct that the caller fills in and the library
 * reads (airlock_limits, airlock_run_options, airlock_tool_def) starts with
 * `size_t size`, the caller's sizeof of it: initialise it with its
 * AIRLOCK_*_INIT macro or airlock_limits_default, which set size and every
 * default. A newer library reads an older caller's smaller struct and
 * defaults what it lacks; an older library refuses a newer caller's larger
 * struct with -E2BIG only when the fields it does not know are set. New
 * fields are only ever added at the end. Each struct has a minimum size,
 * frozen at its first version (the offset just past its last field in
 * 0.1.0): a size below it is refused with -EINVAL as an uninitialised
 * struct, and every size from it up to the library's own is read, so a
 * program built against 0.1.0's airlock.h keeps working when fields are
 * added. Structs the library fills in
 * (airlock_result and the records in it) are owned and freed by the
 * library; callers never allocate them.
 *
 * Thread safety: a configuration is not thread-safe while it is being built;
 * once built it may be shared read-only. A sandbox may run code from several
 * threads at once (each run gets its own copy of the guest). The cache is
 * thread-safe.
 */
#ifndef AIRLOCK_H
#define AIRLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AIRLOCK_PUBLIC __attribute__((visibility("default")))

#define AIRLOCK_VERSION "0.1.0"

/* The version of the library that is running, which may be newer than the
 * AIRLOCK_VERSION a program was built with. Owned by the library. */
AIRLOCK_PUBLIC const char *airlock_version(void);

/* ---- errors ------------------------------------------------------------ */

#define AIRLOCK_MESSAGE_MAX 1024
#define AIRLOCK_PATH_MAX    4096

/* Where an error comes from; the command line maps it to its exit status. */
typedef enum airlock_error_kind {
        AIRLOCK_ERROR_INPUT = 0,   /* bad input, configuration or staging (exit 2) */
        AIRLOCK_ERROR_SANDBOX = 1, /* isolation unavailable: a kernel feature is missing (exit 3) */
        AIRLOCK_ERROR_RUN = 2,     /* a run could not be carried out (the sandbox broke) */
} airlock_error_kind;

typedef struct airlock_error {
        int code; /* negative errno, 0 when unset */
        airlock_error_kind kind;
        char message[AIRLOCK_MESSAGE_MAX]; /* one line, names what is at fault */
        char path[AIRLOCK_PATH_MAX];       /* the path at fault, or "" */
} airlock_error;

/* Clears an error record (code 0, empty strings). */
AIRLOCK_PUBLIC void airlock_error_clear(airlock_error *err);

/* ---- limits ------------------------------------------------------------ */

typedef struct airlock_limits {
        size_t size;                /* sizeof(airlock_limits): airlock_limits_default sets it */
        double timeout_s;           /* wall clock of one run (default 30) */
        double cpu_s;               /* CPU time of one run (default: timeout) */
        uint64_t memory_bytes;      /* memory of one run (default 512 MiB) */
        uint32_t pids;              /* processes and threads (default 64) */
        uint32_t open_files;        /* open file descriptors (default 256) */
        uint64_t max_file_bytes;    /* largest file the guest may write (default 0: the larger of
                                       /tmp's and /output's sizes) */
        uint64_t tmp_bytes;         /* size of /tmp (default 0: memory_bytes) */
        uint64_t output_fs_bytes;   /* size of /output (default: max_output_total + 1 MiB) */
        uint64_t max_output_file;   /* capture: one file (default 16 MiB) */
        uint64_t max_output_total;  /* capture: all files (default 64 MiB) */
        uint32_t max_output_files;  /* capture: number of files (default 1000) */
        uint32_t max_output_depth;  /* capture: directory depth (default 64) */
        uint64_t max_stdout;        /* each of stdout and stderr (default 1 MiB) */
        uint64_t max_stage_bytes;   /* staging: total bytes (default 4 GiB) */
        uint64_t max_stage_files;   /* staging: number of entries (default 100000) */
        uint32_t max_stage_depth;   /* staging: directory depth (default 256) */
        double tool_timeout_s;      /* default timeout of a command tool (default 30) */
        uint64_t http_max_request;  /* HTTP request body (default 16 MiB) */
        uint64_t http_max_response; /* HTTP response body (default 16 MiB) */
        double http_timeout_s;      /* HTTP request (default 30) */
        uint32_t ready_copies;      /* most copies kept ready for a burst of runs (default 4) */
} airlock_limits;

/* Fills every field with its default and size with the caller's sizeof. */
#define airlock_limits_default(limits) airlock_limits_init((limits), sizeof(*(limits)))
/* What airlock_limits_default calls: size is the caller's sizeof(*limits). */
AIRLOCK_PUBLIC void airlock_limits_init(airlock_limits *limits, size_t size);

/* A limit that a user sets by name and value, as the command line's
 * --NAME VALUE does. */
typedef struct airlock_limit_option {
        const char *name; /* the long option without "--": "timeout", "memory", ... */
        const char *unit; /* what VALUE counts: "SEC" (seconds), "MIB", "KIB" or "N" */
        const char *help; /* what the limit caps, a few words for a usage line */
} airlock_limit_option;

/* The i-th limit that is set by name, counting from 0 in a fixed order, or
 * NULL past the last. Owned by the library. */
AIRLOCK_PUBLIC const airlock_limit_option *airlock_limit_option_at(size_t i);
/* Sets the limit called name from value, text in the option's unit. The
 * whole text must be a number in the limit's range, and a whole number
 * unless the unit is SEC; otherwise -EINVAL, with a message that names the
 * option as "--NAME", the value and the range. -ENOENT for a name that
 * airlock_limit_option_at does not list, or whose field lies beyond
 * limits->size (a caller built with an older airlock.h). limits is left as
 * it was on failure; airlock_config_set_limits checks the whole set. */
AIRLOCK_PUBLIC int airlock_limits_set_option(airlock_limits *limits, const char *name,
                                             const char *value, airlock_error *err);
/* Writes the limit called name as text in the option's unit ("30", "512")
 * into buf. Returns its length, -ENOENT for an unknown name, or -ENOBUFS
 * when buf is too small. */
AIRLOCK_PUBLIC int airlock_limits_format_option(const airlock_limits *limits, const char *name,
                                                char *buf, size_t size);

/* ---- configuration ----------------------------------------------------- */

typedef enum airlock_approval {
        AIRLOCK_APPROVAL_NEVER = 0,  /* "never_require" */
        AIRLOCK_APPROVAL_ALWAYS = 1, /* "always_require" */
} airlock_approval;

/* A host tool implemented in C. args_json is the validated arguments object.
 * On success return 0 and set *ret_result_json to a malloc'd JSON text. On
 * failure return a negative value and set *ret_error to a malloc'd message
 * (it reaches the guest as RuntimeError). */
typedef int (*airlock_tool_fn)(void *userdata, const char *args_json, char **ret_result_json,
                               char **ret_error);

typedef struct airlock_tool_def {
        size_t size; /* sizeof(airlock_tool_def): AIRLOCK_TOOL_DEF_INIT sets it */
        const char *name;
        const char *description;
        const char *parameters_json; /* JSON Schema of the arguments object, or NULL */
        airlock_approval approval;
        airlock_tool_fn fn;
        void *userdata;
#ifdef AIRLOCK_ABI_GROWN
        /* Only in tests/unit/test_abi_grown.c's build: a field added after
         * the first version, to check that older callers stay accepted. */
        uint64_t abi_grown;
#endif
} airlock_tool_def;

/* airlock_tool_def t = AIRLOCK_TOOL_DEF_INIT; then set what the tool has. */
#define AIRLOCK_TOOL_DEF_INIT                                                                      \
        {                                                                                          \
                .size = sizeof(airlock_tool_def)                                                   \
        }

typedef struct airlock_config airlock_config;

AIRLOCK_PUBLIC int airlock_config_new(airlock_config **ret, airlock_error *err);
AIRLOCK_PUBLIC void airlock_config_free(airlock_config *cfg);
/* A deep copy of cfg, which the caller changes and frees on its own (a
 * server's configuration for one tenant: the same settings, another
 * workspace). Tool userdata and the approver are shared, not copied. */
AIRLOCK_PUBLIC int airlock_config_copy(const airlock_config *cfg, airlock_config **ret,
                                       airlock_error *err);

/* Stages the contents of dir under /input. */
AIRLOCK_PUBLIC int airlock_config_set_workspace(airlock_config *cfg, const char *dir,
                                                airlock_error *err);
/* Stages host (a file or directory) at /input/path; path NULL means host as
 * given, normalised. The same normalised path for another host is a
 * collision (-EEXIST, naming both hosts and the /input path); the same
 * mount again changes nothing. Other collisions (a file where another mount
 * needs a directory, a mount onto a workspace entry) fail the staging. */
AIRLOCK_PUBLIC int airlock_config_add_mount(airlock_config *cfg, const char *host, const char *path,
                                            airlock_error *err);
/* Allows outbound HTTP to target; methods is comma-separated or NULL for all. */
AIRLOCK_PUBLIC int airlock_config_allow(airlock_config *cfg, const char *target,
                                        const char *methods, airlock_error *err);
/* Loads host tools declared in a JSON tools file (see docs/design.md), all or
 * nothing. The tools of several files add up; a tool name that another
 * tools file declared already is -EEXIST, naming the tool and both files.
 * Loading the same file again replaces its tools. */
AIRLOCK_PUBLIC int airlock_config_load_tools(airlock_config *cfg, const char *file,
                                             airlock_error *err);
/* Registers a C tool; an existing name is replaced and moves last. */
AIRLOCK_PUBLIC int airlock_config_add_tool(airlock_config *cfg, const airlock_tool_def *def,
                                           airlock_error *err);
AIRLOCK_PUBLIC int airlock_config_remove_tool(airlock_config *cfg, const char *name,
                                              airlock_error *err);
/* Sets every limit at once, from a struct that airlock_limits_default
 * initialised. A field out of its range is -EINVAL, naming the field, its
 * value and the range, and changes nothing. */
AIRLOCK_PUBLIC int airlock_config_set_limits(airlock_config *cfg, const airlock_limits *limits,
                                             airlock_error *err);
/* Copies the configuration's limits into *ret (as many fields as the
 * caller's struct has), size included. */
#define airlock_config_get_limits(cfg, ret) airlock_config_read_limits((cfg), (ret), sizeof(*(ret)))
/* What airlock_config_get_limits calls: size is the caller's sizeof(*ret). */
AIRLOCK_PUBLIC void airlock_config_read_limits(const airlock_config *cfg, airlock_limits *ret,
                                               size_t size);
AIRLOCK_PUBLIC int airlock_config_add_preload(airlock_config *cfg, const char *module,
                                              airlock_error *err);
/* Makes the host folder dir of Python packages (a virtualenv's site-packages,
 * say, built for the sandbox's Python version) importable in the guest: bound
 * read-only (no copy) at /opt/airlock/pythonpath/N, N counting from 0 in the
 * order added, and put on sys.path before the system's packages. dir is made
 * absolute and resolved; the same folder again is not added twice. Fails,
 * naming dir, when it is missing, not a folder, or names another Python
 * version in its path; airlock_sandbox_new checks its C extensions too. */
AIRLOCK_PUBLIC int airlock_config_add_python_path(airlock_config *cfg, const char *dir,
                                                  airlock_error *err);
AIRLOCK_PUBLIC void airlock_config_set_approval(airlock_config *cfg, airlock_approval mode);
/* Whether matplotlib figures come back without being asked (default on):
 * every figure shown with plt.show() or still open at the end of a run,
 * and not written with savefig in that run, is saved as
 * /output/figure-N.png. Off, matplotlib's default backend is plain Agg. */
AIRLOCK_PUBLIC void airlock_config_set_auto_figures(airlock_config *cfg, bool on);
/* Whether /input is writable (default off: read-only). On, every run gets
 * /input as a private overlay: the staged copy below (never written, and
 * the host's tree is never written by airlock), the run's writes in a tmpfs
 * of its own capped like /output. The result lists what the run created,
 * modified and deleted there (airlock_result.input_changes); nothing is
 * applied to the host. A session's cells share one overlay: each cell's
 * result lists the changes since the session began. */
AIRLOCK_PUBLIC void airlock_config_set_input_writable(airlock_config *cfg, bool on);
/* The number of targets added with airlock_config_allow: 0 when the guest
 * may make no HTTP request at all. */
AIRLOCK_PUBLIC size_t airlock_config_allow_count(const airlock_config *cfg);
/* always when the base mode is always or any registered tool is; else never. */
AIRLOCK_PUBLIC airlock_approval airlock_config_effective_approval(const airlock_config *cfg);

/* ---- secrets ----------------------------------------------------------- */

/* Where else than in request headers a secret's placeholder is replaced. */
#define AIRLOCK_SECRET_IN_QUERY (1u << 0)
#define AIRLOCK_SECRET_IN_BODY  (1u << 1)

/* Declares the secret name (letters, digits, '_'; at most 64) with value
 * (8 to 8192 bytes, no control characters), which the caller reads from
 * wherever it keeps it; the configuration keeps a copy, zeroed when freed.
 * targets is a NULL-terminated list of "TARGET[=METHODS]" in the syntax of
 * airlock_config_allow (at most 16). The guest sees only a placeholder
 * (airlock.secret(name)); the gateway puts the value in its place, in
 * request headers (and the query or body with the flags), only on requests
 * that the allow-list allows and that match one of targets: a secret allows
 * nothing by itself. Any other request carries the placeholder unchanged.
 * Every response has the value, raw or encoded, replaced by the
 * placeholder. Declaring a name again replaces its value and targets
 * (rotation): sandboxes made afterwards (and the cache's next run) use the
 * new value, under the same placeholder. Errors never contain the value. */
AIRLOCK_PUBLIC int airlock_config_add_secret(airlock_config *cfg, const char *name,
                                             const void *value, size_t len, unsigned flags,
                                             const char *const *targets, airlock_error *err);
/* The placeholder that the guest sees for the secret name, for logs and
 * tests: stable for the life of the process, whatever the value. buf holds
 * at least 128 bytes. -EINVAL for a name that is not a secret's name. */
AIRLOCK_PUBLIC int airlock_secret_placeholder(const char *name, char *buf, size_t size);
/* The number of secrets and the name of the i-th (NULL past the end). */
AIRLOCK_PUBLIC size_t airlock_config_secret_count(const airlock_config *cfg);
AIRLOCK_PUBLIC const char *airlock_config_secret_name(const airlock_config *cfg, size_t i);
/* The value of the cluster secret, the one secret whose target is "peer"
 * (airlock serve's peers sign the requests they forward to each other with
 * it), copied into buf (size bytes; a value is at most 8192), its length in
 * *len. Such a secret has that one target and reaches nothing else: no
 * request of the guest, no upstream server, no placeholder. Returns 0,
 * -ENOENT when there is none, -ERANGE when buf is too small. The caller
 * zeroes buf when done. */
AIRLOCK_PUBLIC int airlock_config_peer_secret(const airlock_config *cfg, void *buf, size_t size,
                                              size_t *len, airlock_error *err);
/* ---- upstream MCP servers (code mode) --------------------------------- */

/* Adds the MCP servers of a servers file, the JSON that MCP clients write:
 * {"mcpServers": {NAME: {"command", "args", "env", "cwd"}}} (or VS Code's
 * "servers"), with airlock's keys for what each server's tools may do
 * (docs/design.md, "Upstream MCP servers (code mode)"). All or nothing;
 * every error names the file, the server and the key at fault: a file not
 * in this format, an unknown key, a command that is not an executable
 * file, a URL that is not http(s), a name declared twice (-EEXIST). Each
 * sandbox made from cfg starts the servers on the host when it is built,
 * writes their tools as Python modules the guest imports (from servers
 * import NAME), and stops them when it closes; a server at a "url" is
 * reached over Streamable HTTP through the gateway (its address rules
 * apply). The old HTTP+SSE transport ("type": "sse") is -EOPNOTSUPP. */
AIRLOCK_PUBLIC int airlock_config_add_servers_file(airlock_config *cfg, const char *file,
                                                   airlock_error *err);
/* The same for the text of a servers file (the Python package's
 * Sandbox(servers={...})): the same checks and messages, without a file's
 * path; relative paths ("cwd", a "command" with a '/') resolve against the
 * working folder. */
AIRLOCK_PUBLIC int airlock_config_add_servers_json(airlock_config *cfg, const char *json_text,
                                                   airlock_error *err);
/* Adds one server: server_json is its object as in a servers file. */
AIRLOCK_PUBLIC int airlock_config_add_server(airlock_config *cfg, const char *name,
                                             const char *server_json, airlock_error *err);
/* Decides whether a call of an upstream tool that needs approval (by its
 * annotations or the servers file) may go ahead: tool is "SERVER.TOOL" as
 * the guest calls it, args_json its arguments. Called on the run's thread
 * while the run waits; it must return promptly and must not call into
 * airlock. Without one (the default) such a call raises ApprovalRequired
 * in the guest, naming the tool and the setting that lets it run. */
typedef bool (*airlock_tool_approver_fn)(void *userdata, const char *tool, const char *args_json);
AIRLOCK_PUBLIC void airlock_config_set_tool_approver(airlock_config *cfg,
                                                     airlock_tool_approver_fn fn, void *userdata);

/* ---- typed host tools (the Python package) ---------------------------- */

/* A host tool that, when it fails, also names the type of its failure (the
 * class of a Python exception, say: "ValueError"). The same contract as
 * airlock_tool_fn, and on failure it may set *ret_error_type to a malloc'd
 * name: letters, digits, '_' and '.', at most 64 bytes (anything else is
 * dropped). The guest's RuntimeError then carries it as its
 * tool_error_type attribute (docs/design.md, "Guest API"). */
typedef int (*airlock_tool_typed_fn)(void *userdata, const char *args_json, char **ret_result_json,
                                     char **ret_error, char **ret_error_type);
/* airlock_config_add_tool with fn in place of def->fn (which is ignored). */
AIRLOCK_PUBLIC int airlock_config_add_typed_tool(airlock_config *cfg, const airlock_tool_def *def,
                                                 airlock_tool_typed_fn fn, airlock_error *err);

/* The configuration read back as JSON text (malloc'd; NULL when out of
 * memory), every entry as the library normalised it:
 * {"workspace": DIR|null, "mounts": [{"host", "path": "/input/..."}],
 *  "allowed_domains": [{"target", "methods": [...]|null (all)}],
 *  "tools": [{"name", "description", "parameters", "approval_mode",
 *             "kind": "callback"|"command"}],
 *  "preloads": [...], "python_paths": [...], "limits": {NAME: TEXT},
 *  "approval_mode", "auto_figures", "input_writable"}
 * in the order added (a replaced allow-list entry or tool keeps its place
 * or moves last as its setter says). */
AIRLOCK_PUBLIC char *airlock_config_to_json(const airlock_config *cfg, airlock_error *err);

/* The program that templates run (see docs/design.md, "Isolation"): by
 * default a copy of the running program itself (/proc/self/exe), which must
 * be linked with libairlock so that its constructor catches the template's
 * start. A host program that is not (an interpreter that loads libairlock
 * as a plug-in, as the Python package does) names one that is: the airlock
 * command of the same build. path must be absolute and an executable file.
 * Must be called before the first sandbox of the process: -EBUSY after. */
AIRLOCK_PUBLIC int airlock_set_template_program(const char *path, airlock_error *err);

/* ---- results ----------------------------------------------------------- */

typedef enum airlock_status {
        AIRLOCK_STATUS_OK = 0,
        AIRLOCK_STATUS_ERROR,
        AIRLOCK_STATUS_TIMEOUT,
        AIRLOCK_STATUS_MEMORY,
        AIRLOCK_STATUS_KILLED,
} airlock_status;

AIRLOCK_PUBLIC const char *airlock_status_name(airlock_status status);

typedef struct airlock_file {
        char *path;       /* "/output/rel/name" */
        char *media_type; /* from /etc/mime.types, else application/octet-stream */
        uint64_t size;
        unsigned char *data;
} airlock_file;

typedef struct airlock_refusal {
        char *path;   /* "/output/rel/name"; bad UTF-8 bytes shown as U+FFFD */
        char *reason; /* "symlink", "not a regular file", "too large", ... */
} airlock_refusal;

/* What a run did to an entry of a writable /input
 * (airlock_config_set_input_writable). */
typedef enum airlock_change {
        AIRLOCK_CHANGE_CREATED = 0,
        AIRLOCK_CHANGE_MODIFIED,
        AIRLOCK_CHANGE_DELETED,
} airlock_change;

/* "created", "modified" or "deleted" (the result JSON's words). */
AIRLOCK_PUBLIC const char *airlock_change_name(airlock_change change);

typedef struct airlock_input_change {
        char *path; /* "/input/rel/name" */
        airlock_change change;
        /* created and modified: the file's new contents, as an /output file's;
         * deleted (a file or a whole directory): NULL, 0, NULL. */
        char *media_type;
        uint64_t size;
        unsigned char *data;
} airlock_input_change;

/* What a session's cell did to the session's interpreter state. */
typedef enum airlock_cell_state {
        AIRLOCK_CELL_NONE = 0,    /* not a cell: a single run */
        AIRLOCK_CELL_KEPT,        /* the cell succeeded: its state is the session's */
        AIRLOCK_CELL_ROLLED_BACK, /* it failed, timed out, hit a limit or was cancelled:
                                   * the state is as it was before the cell */
} airlock_cell_state;

/* One host tool call of a run, for its usage record. */
typedef struct airlock_tool_record {
        char *name; /* as the guest gave it (bad UTF-8 as U+FFFD), at most 64 bytes */
        double duration_ms;
        bool ok; /* false: the tool failed, or the call was refused */
} airlock_tool_record;

/* One HTTP request of a run, for its usage record. */
typedef struct airlock_http_record {
        char *method;
        char *url;  /* scheme://host[:port]/path: never the query, which may carry anything */
        int status; /* 0: no response (refused, failed) */
        uint64_t bytes_sent;     /* request body, as sent */
        uint64_t bytes_received; /* response body, as received */
        bool allowed;            /* false: refused by the allow-list or the address checks */
        double duration_ms;
} airlock_http_record;

/* Caps on a usage record's lists; what is left out is counted. */
#define AIRLOCK_USAGE_MAX_TOOL_CALLS 100
#define AIRLOCK_USAGE_MAX_HTTP       100

/* What a run used (docs/design.md, "usage" in the result JSON). A value
 * not measured is -1 (cpu_ms) or UINT64_MAX (peak_private_bytes). */
typedef struct airlock_usage {
        double wall_ms;
        double cpu_ms;               /* user + system of the run's processes */
        const char *cpu_source;      /* "cgroup" (the copy's cpu.stat), "schedstat" (the copy's
                                      * threads in ns, its reaped children in ticks) or "proc"
                                      * (/proc stat of the copy and its children, in ticks) */
        uint64_t peak_private_bytes; /* USS: pages of the run's own, not the template's */
        const char *memory_source;   /* "cgroup" (the copy's memory peak) or "smaps_rollup"
                                      * (Private_* of the copy, sampled every 20 ms) */
        uint64_t output_bytes;       /* the files captured from /output */
        airlock_tool_record *tool_calls;
        size_t n_tool_calls;
        size_t tool_calls_omitted;
        airlock_http_record *http;
        size_t n_http;
        size_t http_omitted;
} airlock_usage;

typedef struct airlock_result {
        bool success;
        airlock_status status;
        int exit_code;
        char *stdout_data;
        size_t stdout_len;
        bool stdout_truncated;
        char *stderr_data;
        size_t stderr_len;
        bool stderr_truncated;
        airlock_file *files; /* sorted by path, byte order */
        size_t n_files;
        airlock_refusal *refused;
        size_t n_refused;
        char *error_message; /* on failure: what failed, or which limit and its value */
        double duration_ms;
        airlock_cell_state cell_state; /* a session's cell: kept or rolled back */
        /* With a writable /input: what the run created, modified and deleted
         * there, sorted by path (a deletion before a creation at the same
         * path), with the caps and refusals of /output (refused entries are
         * in refused, under "/input/..."). NULL and 0 otherwise. */
        airlock_input_change *input_changes;
        size_t n_input_changes;
        airlock_usage usage; /* what the run used */
} airlock_result;

AIRLOCK_PUBLIC void airlock_result_free(airlock_result *result);
/* The result's usage record alone, as the result JSON's "usage" object
 * (for audit logs: no code, output or secret in it). Malloc'd; NULL when
 * out of memory. */
AIRLOCK_PUBLIC char *airlock_usage_to_json(const airlock_result *result);
/* The result JSON of docs/design.md, "contents" included. Returns malloc'd text or NULL. */
AIRLOCK_PUBLIC char *airlock_result_to_json(const airlock_result *result);
/* The same object as a jansson value: airlock_result_to_jansson in
 * airlock-jansson.h, for programs that use jansson themselves. */

/* ---- sandbox ----------------------------------------------------------- */

typedef struct airlock_sandbox airlock_sandbox;

/* Stages the inputs, starts the isolated template interpreter (after preloads
 * and a warm-up) and a first copy. Returns -ENOSYS, -EPERM, ... with a message
 * naming the missing kernel feature when isolation cannot be set up. */
AIRLOCK_PUBLIC int airlock_sandbox_new(const airlock_config *cfg, airlock_sandbox **ret,
                                       airlock_error *err);
/* The same, for a sandbox that serves one run (a one-shot command, such as
 * `airlock run`): its template starts the first copy and prepares nothing
 * beside it for runs that will not come (no warm-up of the interpreter, no
 * cache of fonts). More runs still work, each slower than in a sandbox of
 * airlock_sandbox_new; pass airlock_run_options.last to the run. */
AIRLOCK_PUBLIC int airlock_sandbox_new_oneshot(const airlock_config *cfg, airlock_sandbox **ret,
                                               airlock_error *err);
/* Checks code as every run does before it starts: -EINVAL for NULL or a
 * NUL byte, -EILSEQ for text that is not valid UTF-8, -E2BIG past the cap
 * of 16 MiB. For a caller that wants to refuse such code early (before it
 * asks a user to approve it, say). */
AIRLOCK_PUBLIC int airlock_check_code(const char *code, size_t len, airlock_error *err);
/* Called with the bytes of the code's stdout (stream 1) or stderr (stream
 * 2) as they reach the host; see airlock_run_options.on_output. */
typedef void (*airlock_output_fn)(void *arg, int stream, const char *data, size_t len);

/* Options of one run; NULL where a run function takes them means all
 * defaults. Initialise with AIRLOCK_RUN_OPTIONS_INIT, then set fields.
 *
 * cancel_fd: when it becomes readable (an eventfd or a pipe), the run is
 * stopped and ends with status "killed"; -1 for none.
 *
 * last: the sandbox's last run (a one-shot command). No copy is prepared
 * for a next run, so airlock_sandbox_close right after it is quick.
 *
 * on_watch, watch_fd, watch_arg: for a caller that lends its thread to the
 * run while other input may arrive (a server's reader): on_watch(watch_arg)
 * is called at most once, on the calling thread, when watch_fd becomes
 * readable while the code runs, or before any step that may take long (a
 * sandbox build, a workspace check, a wait for a copy or a run slot), so
 * that the caller can hand its input to another thread. It may be called
 * while the sandbox's own lock is held, so it must return promptly and
 * must not call into airlock. Unused while on_watch is NULL.
 *
 * on_output, output_arg: live output of the run, for a caller that reports
 * on a long run while it lasts (an MCP server's notifications/progress).
 * on_output(output_arg, stream, data, len) is called with the bytes of the
 * code's stdout (stream 1) or stderr (stream 2) as they reach the host, in
 * the order each stream wrote them; data is not NUL-terminated and is
 * valid only during the call. The bytes are captured into the result all
 * the same (and cut there at max_stdout; the hook sees everything the host
 * read). The guest's stdout is block-buffered when it is not a terminal,
 * as a script's is when piped, so its output arrives when the code flushes
 * it (print(..., flush=True), a full buffer, or the end of the run);
 * stderr arrives line by line. on_output runs on the calling thread,
 * inside the run's loop: it must return promptly and must not call into
 * airlock. Unused while NULL.
 *
 * argv: the code's sys.argv[1:], as for `python3 script.py ARGS`: a
 * NULL-terminated array of UTF-8 strings, the first being sys.argv[0] (the
 * script's name: "-c" or a file's name); NULL leaves sys.argv as [''].
 * At most AIRLOCK_RUN_ARGV_MAX strings, AIRLOCK_RUN_ARGV_BYTES bytes in
 * all (-E2BIG past either, -EILSEQ for a string that is not UTF-8).
 *
 * stdin_data, stdin_len: what the code's standard input holds (sys.stdin,
 * input(), and fd 0 of the code and the processes it starts), as for
 * `python3 script.py < data`; NULL (the default) leaves it empty. At most
 * AIRLOCK_RUN_STDIN_MAX bytes (-E2BIG past it). Both were added after the
 * first version: an older caller's struct has neither.
 *
 * traceparent, tracestate, baggage: the W3C trace context of the caller
 * (docs/tracing.md), the parent of the run's span when tracing is
 * configured (the OTEL_* environment variables); a missing or malformed
 * traceparent starts a new trace. Upstream MCP servers of code mode get
 * the run's context, with tracestate and baggage, in their requests'
 * params._meta. NULL (the default): the span of the calling thread's MCP
 * request, if any, else a new trace. Added after stdin_data.
 *
 * stdin_mode, stdin_fd, on_input, input_arg: standard input read from the
 * caller's stdin_fd while the code runs, on demand, as python3 reads a pipe:
 * the host reads stdin_fd only when the code asks for input, at most what
 * it asks for (64 KiB a read), so that a run whose code never reads leaves
 * the fd alone and never waits on it. A wait for stdin_fd also watches the
 * run's deadline and cancel_fd, and the code's output keeps flowing
 * meanwhile. End of file on stdin_fd is the code's end of file. A run reads
 * at most AIRLOCK_RUN_STDIN_STREAM_MAX bytes in all: a read past it raises
 * OSError in the code, naming the cap. The modes (0, the default, is none:
 * stdin_fd is not read, and stdin_data applies):
 *   AIRLOCK_STDIN_STREAM: sys.stdin, input() (which writes its prompt to
 *     stdout first) and sys.stdin.buffer read stdin_fd, as for
 *     `producer | python3 script.py`; fd 0 of the processes the code starts
 *     stays empty (/dev/null).
 *   AIRLOCK_STDIN_PROMPT: a notebook's stdin channel: input(prompt) and
 *     getpass.getpass(prompt) call on_input(input_arg, prompt, password) on
 *     the calling thread (it must return promptly and must not call into
 *     airlock: it asks someone, say a notebook's front-end), then read one
 *     line from stdin_fd, and return it without its newline (end of file
 *     is EOFError). sys.stdin reads nothing (it is /dev/null).
 * All four were added after baggage, at the end of the struct. */
#define AIRLOCK_RUN_ARGV_MAX         4096
#define AIRLOCK_RUN_ARGV_BYTES       (256u << 10)
#define AIRLOCK_RUN_STDIN_MAX        (8u << 20)
#define AIRLOCK_RUN_STDIN_STREAM_MAX (64u << 20)
enum { AIRLOCK_STDIN_NONE = 0, AIRLOCK_STDIN_STREAM = 1, AIRLOCK_STDIN_PROMPT = 2 };
typedef void (*airlock_input_fn)(void *arg, const char *prompt, bool password);
typedef struct airlock_run_options {
        size_t size; /* sizeof(airlock_run_options): AIRLOCK_RUN_OPTIONS_INIT sets it */
        int cancel_fd;
        bool last;
        int watch_fd;
        void (*on_watch)(void *arg);
        void *watch_arg;
        airlock_output_fn on_output;
        void *output_arg;
        const char *const *argv;
        const char *stdin_data;
        size_t stdin_len;
        const char *traceparent;
        const char *tracestate;
        const char *baggage;
        int stdin_mode;
        int stdin_fd;
        airlock_input_fn on_input;
        void *input_arg;
#ifdef AIRLOCK_ABI_GROWN
        /* Only in tests/unit/test_abi_grown.c's build (see airlock_tool_def). */
        uint64_t abi_grown;
#endif
} airlock_run_options;

#define AIRLOCK_RUN_OPTIONS_INIT                                                                   \
        {                                                                                          \
                .size = sizeof(airlock_run_options), .cancel_fd = -1, .watch_fd = -1               \
        }

/* Runs code in a fresh copy of the template. A failing run is not an error:
 * it returns 0 with result->success false. Negative only when the run could
 * not be carried out at all. opts may be NULL. */
AIRLOCK_PUBLIC int airlock_sandbox_run(airlock_sandbox *sb, const char *code, size_t len,
                                       const airlock_run_options *opts, airlock_result **ret,
                                       airlock_error *err);
/* Warnings about the sandbox's configuration that did not stop it, one line
 * each ending in a newline (a .pth entry of a --python-path folder that
 * points outside it, not followed), or NULL. Owned by the sandbox. */
AIRLOCK_PUBLIC const char *airlock_sandbox_warnings(const airlock_sandbox *sb);
/* Closes the sandbox: kills every process, closes every fd, removes staging. */
AIRLOCK_PUBLIC void airlock_sandbox_close(airlock_sandbox *sb);

/* Sessions keep interpreter state across runs (a notebook-style kernel),
 * in one copy of the template, until closed. /output is captured and then
 * emptied after every run; /tmp persists.
 *
 * Cells are transactional: a cell runs in the session's state, which a
 * frozen fork taken before the cell keeps a copy of. When the cell succeeds
 * its state becomes the session's (result->cell_state AIRLOCK_CELL_KEPT).
 * When it fails (an exception, a non-zero exit), times out, hits a limit
 * (memory, CPU, file size) or is cancelled, its interpreter is killed and
 * the copy taken before the cell becomes the session's interpreter
 * (AIRLOCK_CELL_ROLLED_BACK): variables, imports and objects are as they
 * were before the cell, and the session goes on. What lives outside the
 * interpreter's memory does not roll back: files in /tmp, bytes a cell
 * wrote into a file, the offset of a file opened before the cell (the fork
 * shares it: it stays where the failed cell left it), anything sent over
 * HTTP or to a tool. A
 * rollback ends every process and thread that earlier cells started, the
 * interpreter's main thread aside. The session ends (later calls fail with
 * -ESRCH) only when the rollback itself fails or the session's processes
 * are killed from outside. */
typedef struct airlock_session airlock_session;
typedef struct airlock_snapshot airlock_snapshot;

AIRLOCK_PUBLIC int airlock_session_open(airlock_sandbox *sb, airlock_session **ret,
                                        airlock_error *err);
/* Runs a cell (see above); opts as for airlock_sandbox_run, and may be NULL. */
AIRLOCK_PUBLIC int airlock_session_run(airlock_session *s, const char *code, size_t len,
                                       const airlock_run_options *opts, airlock_result **ret,
                                       airlock_error *err);
/* Takes a snapshot of the session's interpreter state (memory only: not the
 * files in /tmp, and not threads other than the main one). */
AIRLOCK_PUBLIC int airlock_session_snapshot(airlock_session *s, airlock_snapshot **ret,
                                            airlock_error *err);
/* Replaces the session's interpreter state with the snapshot's; every
 * process the current state started ends. A snapshot can be restored any
 * number of times. */
AIRLOCK_PUBLIC int airlock_session_restore(airlock_session *s, const airlock_snapshot *snap,
                                           airlock_error *err);
/* Frees a snapshot (and ends its frozen process while the session lives). */
AIRLOCK_PUBLIC void airlock_snapshot_free(airlock_snapshot *snap);
/* The memory the session holds of its own, in bytes: where the sandbox has
 * a cgroup per copy, what is charged to the session's (its interpreter, the
 * copy of its state that a failed cell rolls back to, the processes its
 * cells started and its files in /tmp; not the template's pages they still
 * share): the session's USS taken as one unit. Elsewhere, the proportional
 * set size (PSS) of the interpreter and its rollback copy, a page only the
 * two share counted once. */
AIRLOCK_PUBLIC int airlock_session_memory(airlock_session *s, uint64_t *ret_bytes,
                                          airlock_error *err);
/* Whether the session can still run cells (false once a call failed with
 * -ESRCH, or a cell's result came back with cell_state AIRLOCK_CELL_NONE:
 * its rollback failed and the session ended). */
AIRLOCK_PUBLIC bool airlock_session_alive(const airlock_session *s);
/* Forks the session: *ret is a new session whose interpreter is a
 * copy-on-write clone of s's as it is now (variables, imports, objects; a
 * cell's worth of memory is shared until either side writes it), which can
 * run a cell at once; s goes on unchanged. The fork is an interpreter of
 * its own inside s's copy of the template, not a new copy (a process cannot
 * move into another PID namespace), so the two SHARE: the files in /tmp,
 * the writable /input overlay (and the changes a result lists), /output
 * (cells of the session and of its forks therefore run one at a time, each
 * with an empty /output), the offsets of files opened before the fork, the
 * copy's cgroup and its limits on memory and processes (and
 * airlock_session_memory's figure, where the copy has a cgroup: it is the
 * copy's, all handles together), and the workspace as it was staged. Each
 * has its OWN: variables and objects, its cell base and rollbacks (a failed
 * cell in one rolls back that one only, and ends only its own threads and
 * processes), snapshots, stdout and stderr, and threads (only the main one
 * is cloned). Closing s does not end its forks, nor a fork s: the copy
 * lives until the last of them is closed. Closing one ends the processes
 * it started; a process that left its session (setsid) ends at another
 * handle's next rollback or with the copy. A fork may be forked. The fork
 * holds s's state as s's last cell left it: it takes over s's cell base,
 * and s takes a new one while the caller goes on. -ESRCH when s has ended;
 * -EAGAIN (s unchanged) when the clone is refused or the base could not
 * become the fork. */
AIRLOCK_PUBLIC int airlock_session_fork(airlock_session *s, airlock_session **ret,
                                        airlock_error *err);
/* Ends every process of the session (of this handle: see
 * airlock_session_fork). The sandbox must outlive its sessions. */
AIRLOCK_PUBLIC void airlock_session_close(airlock_session *s);

/* ---- tool surface ------------------------------------------------------ */

/* The execute_code tool description and agent instructions, generated from
 * the live configuration. Both malloc'd. */
AIRLOCK_PUBLIC int airlock_describe(const airlock_config *cfg, char **ret_description,
                                    char **ret_instructions, airlock_error *err);
/* {"name","description","input_schema","instructions","approval_mode"} */
AIRLOCK_PUBLIC char *airlock_describe_json(const airlock_config *cfg, airlock_error *err);

/* The same texts for a running sandbox, which also name the notable Python
 * packages the guest can import, with their versions, and the top-level
 * packages of each --python-path folder, as found inside the guest (by a run
 * made on the first call, which reads package metadata and imports none).
 * The JSON adds "packages", "python_path" and "warnings". */
AIRLOCK_PUBLIC int airlock_sandbox_describe(airlock_sandbox *sb, char **ret_description,
                                            char **ret_instructions, airlock_error *err);
AIRLOCK_PUBLIC char *airlock_sandbox_describe_json(airlock_sandbox *sb, airlock_error *err);

/* A cache of sandboxes keyed by configuration fingerprint, LRU-evicted.
 * Configurations that differ only in their workspace and mounts share one
 * sandbox (one template), each run getting its own staged workspace (and
 * each version of it staged once); with upstream MCP servers each
 * workspace keeps a sandbox of its own (docs/design.md, "One template,
 * many workspaces"). */
typedef struct airlock_cache airlock_cache;

AIRLOCK_PUBLIC int airlock_cache_new(unsigned max_sandboxes, double idle_timeout_s,
                                     airlock_cache **ret, airlock_error *err);
/* Runs code in the cached sandbox for cfg, creating it (or rebuilding a stale
 * or broken one) as needed; opts as for airlock_sandbox_run, and may be
 * NULL. Thread-safe. */
AIRLOCK_PUBLIC int airlock_cache_run(airlock_cache *cache, const airlock_config *cfg,
                                     const char *code, size_t len, const airlock_run_options *opts,
                                     airlock_result **ret, airlock_error *err);
/* Opens a session in the cached sandbox for cfg, built as airlock_cache_run
 * would. The session keeps that sandbox, and the workspace as it was
 * staged then, until it is closed, even once the workspace changed or the
 * cache evicted the sandbox: a new session sees a changed workspace. Every
 * such session must be closed before the cache is. Thread-safe; one
 * session is used by one thread at a time. */
AIRLOCK_PUBLIC int airlock_cache_session_open(airlock_cache *cache, const airlock_config *cfg,
                                              airlock_session **ret, airlock_error *err);
/* airlock_sandbox_describe_json of the cached sandbox for cfg, built as
 * airlock_cache_run would. */
AIRLOCK_PUBLIC char *airlock_cache_describe_json(airlock_cache *cache, const airlock_config *cfg,
                                                 airlock_error *err);
/* Lets go of what the cache keeps for the workspace at path (as a
 * configuration names it): its staged copies and their open files, now when
 * no run or session uses them, else when the last one ends; with upstream
 * MCP servers, the sandbox of that workspace too. For a caller whose
 * workspace will not be used again soon (airlock serve's removed tenant); a
 * later run stages it afresh. Thread-safe. */
AIRLOCK_PUBLIC void airlock_cache_forget_workspace(airlock_cache *cache, const char *path);
/* Tells the cache that the workspace at path (as a configuration names it)
 * changed in a way its change watch may not see: on shared storage, a
 * change another machine made. The next run or session with that
 * workspace reads its tree again in full (and stages only what changed).
 * The cache itself walks a workspace on a network or FUSE file system at
 * every call while it holds at most 1000 entries; this is for larger ones,
 * whose writers bump a generation the caller watches (design.md, "Shared
 * storage"). Thread-safe. */
AIRLOCK_PUBLIC void airlock_cache_workspace_changed(airlock_cache *cache, const char *path);
/* The same, for a caller that knows where the change is: only the own
 * entries of the folders dirs[0..n-1] (paths below the workspace, "" for
 * the workspace itself, no leading or trailing '/') changed, no folder was
 * made or removed anywhere. The next run or session with that workspace
 * reads those folders again (each listed alone, its subfolders kept), not
 * the whole tree, when the cache's watch of it holds a complete last walk;
 * else, or when a folder is not one the last walk found, or more than 64
 * are named, it reads the tree in full as airlock_cache_workspace_changed
 * makes it. A folder named wrongly is the caller's fault: a change outside
 * the folders named is then seen only at the next full walk (at the
 * latest the safety walk, 10 s). n 0 is airlock_cache_workspace_changed.
 * Thread-safe. */
AIRLOCK_PUBLIC void airlock_cache_workspace_changed_in(airlock_cache *cache, const char *path,
                                                       const char *const *dirs, size_t n);
/* The same, file by file, for a writer that knows exactly what it wrote:
 * the files files[0..n-1] (paths below the workspace, no leading or
 * trailing '/') are the only entries that changed in their folders, and no
 * folder was made or removed. hashes[i] NULL: files[i] was removed; else
 * it holds sizes[i] bytes whose airlock_content_hash is hashes[i] (for
 * files of 64 KiB and more, whose bytes the cache does not hash, any
 * string). The next run or session with that workspace opens and reads
 * those files alone (their folders are neither listed nor their other
 * entries looked up) when the cache's watch holds a complete last walk,
 * and stages only them; a file that is not what its writer said (other
 * bytes or size, a link, gone or there against the word), a folder the
 * last walk did not find, more than 64 files, or, on shared storage under
 * the shared walk cap, a metadata change that the files do not explain
 * (a change behind the writer's back) makes it read the tree in full as
 * airlock_cache_workspace_changed does. n 0 is
 * airlock_cache_workspace_changed. Thread-safe. */
AIRLOCK_PUBLIC void airlock_cache_workspace_files_changed(airlock_cache *cache, const char *path,
                                                          const char *const *files,
                                                          const uint64_t *sizes,
                                                          const char *const *hashes, size_t n);
/* The hash the cache's tree signatures take of a small file's content: 32
 * lowercase hex digits and a NUL in ret_hex. Non-cryptographic (staleness
 * only). For airlock_cache_workspace_files_changed's hashes. */
AIRLOCK_PUBLIC void airlock_content_hash(const void *data, size_t len, char ret_hex[33]);
AIRLOCK_PUBLIC void airlock_cache_close(airlock_cache *cache);

/* For a caller that hands run results to a model (the MCP server): the
 * library's view of which files are text. */

/* Whether a file of this media type (as airlock_file.media_type gives it)
 * is text a model reads as text: every text type, JSON, XML (and the +json, +xml
 * types, SVG included), CSV, YAML, TOML, SQL, shell and other source code.
 * The file's bytes must still be valid UTF-8 to be shown as text: the
 * library does not check them here. */
AIRLOCK_PUBLIC bool airlock_media_type_is_text(const char *media_type);

#ifdef __cplusplus
}
#endif
#endif
