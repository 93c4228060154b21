/* The guest channel's protocol, as tables: the one place where the names
 * that the host (C) and the guest runtime (src/guest/runtime.py) exchange
 * are written down. The C side includes this through core/wire.h; the
 * guest runtime gets the same names as Python constants, which
 * src/guest/gen_wire.c writes from these tables at build time and
 * scripts/embed_runtime.sh appends to runtime.py, so that the two sides
 * cannot disagree. Nothing here but macros (the errno names of WIRE_ERRORS
 * are used only by C code that includes <errno.h>), so that the generator
 * needs nothing else.
 *
 * A frame on a copy's channel is a JSON object (core/channel.h) whose "op"
 * is one of WIRE_OPS; a guest request is answered by a reply frame
 * {"ok": true, "result": ...} or {"ok": false, "kind": K, "error": message},
 * K being one of WIRE_KINDS. */
#ifndef AIRLOCK_WIRE_TABLE_H
#define AIRLOCK_WIRE_TABLE_H

/* The "op" of each frame (WIRE_OP_*; _OP_* in Python).
 *   tool      guest -> host  call_tool: {"name", "args"}
 *   http      guest -> host  an HTTP request: {"method", "url", "headers",
 *                            "body_base64"} (host/gateway.h)
 *   run       host -> copy   run {"code"}
 *   input     host -> copy   a late-input copy's first frame: the run's
 *                            staged input follows (COPY_INPUT, core/wire.h)
 *   end       copy -> host   the run ended: {"status" (WIRE_STATUS_*),
 *                            "exit_code", "alone"}
 *   session   both ways      become a session / the session is active
 *   snapshot  both ways      take a snapshot, {"base": true} for a cell base
 *                            (which a fork may take over) / taken: {"id"}
 *   restore   host -> copy   go back to snapshot {"id", "keep", "spare"}
 *   restored  copy -> host   the restored state is active
 *   drop      host -> copy   forget snapshot {"id"}
 *   fork      both ways      fork the handle, its fds after the frame,
 *                            {"base": id} to make the fork of that cell
 *                            base / the parent: forked {"id", "base": true
 *                            when the base became the fork}; the fork, on
 *                            its own channel: active {"sid"}
 *   leave     both ways      end the processes of a sibling handle {"sid"},
 *                            sent to another handle / done
 *   error     copy -> host   a session request failed: {"error"}
 *   hurry     host -> copy   the host waits for work that a session does
 *                            for a later call (a cell base): it starts at
 *                            once; or for a copy still being prepared: it
 *                            skips its warming; ignored otherwise
 *   thaw      host -> copy   before a cell: continue the processes that
 *                            the last cell's end stopped, but those of the
 *                            sibling handles' session ids {"spare"}
 *   secret    guest -> host  airlock.secret(name): {"name"}; the result is
 *                            the secret's placeholder (host/secrets.h)
 *   stdin     guest -> host  the code reads its standard input (a run whose
 *                            "run" frame had "stdin_mode"): {"size", and
 *                            "prompt", "password" when input() or getpass
 *                            asks a new line in prompt mode}; the result
 *                            is up to "size" bytes in base64, "" at end of
 *                            file (serve_stdin in sandbox/run.c) */
#define WIRE_OP_TOOL     "tool"
#define WIRE_OP_HTTP     "http"
#define WIRE_OP_RUN      "run"
#define WIRE_OP_END      "end"
#define WIRE_OP_SESSION  "session"
#define WIRE_OP_SNAPSHOT "snapshot"
#define WIRE_OP_RESTORE  "restore"
#define WIRE_OP_RESTORED "restored"
#define WIRE_OP_DROP     "drop"
#define WIRE_OP_ERROR    "error"
#define WIRE_OP_SECRET   "secret"
#define WIRE_OP_FORK     "fork"
#define WIRE_OP_LEAVE    "leave"
#define WIRE_OP_HURRY    "hurry"
#define WIRE_OP_THAW     "thaw"
#define WIRE_OP_INPUT    "input"
#define WIRE_OP_STDIN    "stdin"
#define WIRE_OPS(X)                                                                                \
        X(TOOL)                                                                                    \
        X(HTTP)                                                                                    \
        X(RUN)                                                                                     \
        X(END)                                                                                     \
        X(SESSION)                                                                                 \
        X(SNAPSHOT)                                                                                \
        X(RESTORE)                                                                                 \
        X(RESTORED)                                                                                \
        X(DROP)                                                                                    \
        X(ERROR)                                                                                   \
        X(SECRET)                                                                                  \
        X(FORK)                                                                                    \
        X(LEAVE)                                                                                   \
        X(HURRY)                                                                                   \
        X(THAW)                                                                                    \
        X(INPUT)                                                                                   \
        X(STDIN)

/* The guest's requests to the host, each answered by one reply frame: the
 * rows both sides dispatch from. The host serves a request with the
 * handler the row names (serve_<handler> in sandbox/run.c, which the build
 * requires to exist); the guest runtime sends only the ops of these rows
 * (_REQUESTS in Python, checked by runtime.py's _ask). slow: the handler
 * may take long (a tool, an HTTP request), so that the caller's watch of
 * its input is handed to another thread first (airlock_run_options.on_watch).
 *   X(op,     handler, slow) */
#define WIRE_REQUESTS(X)                                                                           \
        X(TOOL, tool, 1)                                                                           \
        X(HTTP, http, 1)                                                                           \
        X(SECRET, secret, 0)                                                                       \
        X(STDIN, stdin, 0)

/* The keys of the frames (WIRE_KEY_*; _KEY_* in Python): "op" in every
 * frame, the reply to a guest request ({"ok": true, "result": ...} or
 * {"ok": false, "kind", "error"}), and the fields of each op above. An
 * HTTP reply's result is {"status", "headers", "body_base64"}. */
#define WIRE_KEY_OP          "op"
#define WIRE_KEY_OK          "ok"
#define WIRE_KEY_RESULT      "result"
#define WIRE_KEY_KIND        "kind"
#define WIRE_KEY_ERROR       "error"
#define WIRE_KEY_NAME        "name"
#define WIRE_KEY_ARGS        "args"
#define WIRE_KEY_METHOD      "method"
#define WIRE_KEY_URL         "url"
#define WIRE_KEY_HEADERS     "headers"
#define WIRE_KEY_BODY_BASE64 "body_base64"
#define WIRE_KEY_STATUS      "status"
#define WIRE_KEY_CODE        "code"
#define WIRE_KEY_EXIT_CODE   "exit_code"
#define WIRE_KEY_ALONE       "alone"
#define WIRE_KEY_ID          "id"
#define WIRE_KEY_KEEP        "keep"
#define WIRE_KEY_SPARE       "spare"
#define WIRE_KEY_SID         "sid"
#define WIRE_KEY_BASE        "base"
/* A failed tool call's reply may add "error_type": the type name a typed
 * tool (airlock_config_add_typed_tool) gave for its failure. */
#define WIRE_KEY_ERROR_TYPE "error_type"
/* An "end" frame may add "signal": the signal that ended a single run's
 * pid 1 (guest.c, exit_by_signal); its exit status is then 128 + it. */
#define WIRE_KEY_SIGNAL "signal"
/* A "run" frame may add "argv" (the code's sys.argv, an array of strings)
 * and "stdin_base64" (its standard input), from airlock_run_options. */
#define WIRE_KEY_ARGV  "argv"
#define WIRE_KEY_STDIN "stdin_base64"
/* A "run" frame may add "stdin_mode" (GUEST_STDIN_STREAM or
 * GUEST_STDIN_PROMPT, airlock_run_options.stdin_mode): the code reads its
 * standard input from the host ("stdin" requests). */
#define WIRE_KEY_STDIN_MODE "stdin_mode"
#define WIRE_KEY_SIZE       "size"
#define WIRE_KEY_PROMPT     "prompt"
#define WIRE_KEY_PASSWORD   "password"
#define WIRE_KEYS(X)                                                                               \
        X(OP)                                                                                      \
        X(OK)                                                                                      \
        X(RESULT)                                                                                  \
        X(KIND)                                                                                    \
        X(ERROR)                                                                                   \
        X(NAME)                                                                                    \
        X(ARGS)                                                                                    \
        X(METHOD)                                                                                  \
        X(URL)                                                                                     \
        X(HEADERS)                                                                                 \
        X(BODY_BASE64)                                                                             \
        X(STATUS)                                                                                  \
        X(CODE)                                                                                    \
        X(EXIT_CODE)                                                                               \
        X(ALONE)                                                                                   \
        X(SIGNAL)                                                                                  \
        X(ID)                                                                                      \
        X(KEEP)                                                                                    \
        X(SPARE)                                                                                   \
        X(SID)                                                                                     \
        X(BASE)                                                                                    \
        X(ERROR_TYPE)                                                                              \
        X(ARGV)                                                                                    \
        X(STDIN)                                                                                   \
        X(STDIN_MODE)                                                                              \
        X(SIZE)                                                                                    \
        X(PROMPT)                                                                                  \
        X(PASSWORD)

/* How the guest's code ended, the "status" of an "end" frame (runtime.py's
 * _run, template/guest.c; WIRE_STATUS_*, _STATUS_* in Python). "memory"
 * is the run's own MemoryError, which the host reports as the run
 * exceeding its memory limit; a MemoryError that the host raised for its
 * own lack of memory (WIRE_ERRORS) is an ordinary "error". */
#define WIRE_STATUS_OK     "ok"
#define WIRE_STATUS_ERROR  "error"
#define WIRE_STATUS_MEMORY "memory"
#define WIRE_STATUSES(X)                                                                           \
        X(OK)                                                                                      \
        X(ERROR)                                                                                   \
        X(MEMORY)

/* The "kind" of a refusal: the name of the built-in exception the guest
 * raises for it (WIRE_KIND_*). In Python, _KINDS is the set of them, and a
 * reply naming anything else raises RuntimeError. */
#define WIRE_KIND_PERMISSION         "PermissionError"
#define WIRE_KIND_VALUE              "ValueError"
#define WIRE_KIND_RUNTIME            "RuntimeError"
#define WIRE_KIND_TIMEOUT            "TimeoutError"
#define WIRE_KIND_CONNECTION_REFUSED "ConnectionRefusedError"
#define WIRE_KIND_CONNECTION_RESET   "ConnectionResetError"
#define WIRE_KIND_CONNECTION         "ConnectionError"
#define WIRE_KIND_INTERRUPTED        "InterruptedError"
#define WIRE_KIND_MEMORY             "MemoryError"
#define WIRE_KIND_OS                 "OSError"
#define WIRE_KINDS(X)                                                                              \
        X(PERMISSION)                                                                              \
        X(VALUE)                                                                                   \
        X(RUNTIME)                                                                                 \
        X(TIMEOUT)                                                                                 \
        X(CONNECTION_REFUSED)                                                                      \
        X(CONNECTION_RESET)                                                                        \
        X(CONNECTION)                                                                              \
        X(INTERRUPTED)                                                                             \
        X(MEMORY)                                                                                  \
        X(OS)

/* The errors of an HTTP request (gateway_request() in host/gateway.h) and
 * the kind the host sends for each: the only mapping from an errno to a
 * guest exception (gateway_guest_exception()). Any other errno is
 * WIRE_KIND_OS. A tool's failure is WIRE_KIND_VALUE (unknown tool, bad
 * arguments) or WIRE_KIND_RUNTIME (the tool failed), whatever its cause.
 * The message is always one line naming the method and the URL.
 *   X(errno,       when,                                  kind) */
#define WIRE_ERRORS(X)                                                                             \
        X(EACCES, "allow-list, path or address refusal", PERMISSION)                               \
        X(EINVAL, "malformed request (URL, method, headers, base64)", VALUE)                       \
        X(E2BIG, "request or response over its cap", VALUE)                                        \
        X(ETIMEDOUT, "no complete response in time", TIMEOUT)                                      \
        X(ECONNREFUSED, "nothing listens there", CONNECTION_REFUSED)                               \
        X(ECONNRESET, "connection dropped mid-way", CONNECTION_RESET)                              \
        X(EHOSTUNREACH, "the name does not resolve", CONNECTION)                                   \
        X(EIO, "any other transfer failure (TLS)", CONNECTION)                                     \
        X(ECANCELED, "the run was cancelled meanwhile (it ends anyway)", INTERRUPTED)              \
        X(ENOMEM, "the host is out of memory", MEMORY)

/* Paths and names of the guest's world that the host and the runtime share
 * (_GUEST_* in Python). */
#define GUEST_CACHE_DIR       "/cache"           /* the template's read-only cache */
#define GUEST_FIGURES_BACKEND "_airlock_figures" /* module of the matplotlib backend */
#define GUEST_STDIN_STREAM    "stream"           /* the modes of "stdin_mode" */
#define GUEST_STDIN_PROMPT    "prompt"
#define WIRE_GUEST(X)                                                                              \
        X(GUEST_CACHE_DIR)                                                                         \
        X(GUEST_FIGURES_BACKEND)                                                                   \
        X(GUEST_STDIN_STREAM)                                                                      \
        X(GUEST_STDIN_PROMPT)

#endif
