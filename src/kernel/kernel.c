/* airlock kernel: the Jupyter kernel (docs/jupyter.md).
 *
 * Two threads share the work. The I/O thread (main) owns every ZeroMQ
 * socket but the heartbeat's: it reads the shell and control channels,
 * answers kernel_info, interrupt and shutdown at once, even while a cell
 * runs, queues the other shell requests, and sends what the worker
 * produced. The worker thread owns the airlock session: it runs one shell
 * request at a time (execute, complete, inspect, is_complete, history,
 * comm_*), and hands every message it would send to the I/O thread through
 * a queue and an eventfd. A third thread echoes the heartbeat.
 *
 * A cell's live output (airlock_run_options.on_output) is parsed on the
 * worker thread: the cell's stdout and stderr become stream messages as
 * they arrive, and the records of the Python side (driver.py) become
 * display_data, clear_output, execute_result and error. */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <patchlevel.h>

#include "jsonrpc.h"
#include "kernel.h"
#include "kernel_service.h"
#include "trace.h"

/* A record of the Python side on stdout: "\x1e" KREC_TAG JSON "\n". */
#define KREC_TAG "airlock-kernel:"
/* The longest record kept (a figure's PNG in base64, a large HTML table):
 * a longer one is dropped, with a line on the cell's stderr naming the
 * cap. */
#define KREC_MAX (64u << 20)
/* The history the kernel keeps: the last cells, and the bytes of their
 * inputs and outputs together (a cell's code chooses its output's size: a
 * record it forges may carry up to KREC_MAX of it). */
#define KHIST_MAX_CELLS 10000
#define KHIST_MAX_BYTES (64u << 20)
/* Bytes of messages the worker may queue for the I/O thread: past this, a
 * cell's output waits until the I/O thread has sent some (it never blocks
 * for long: PUB sockets drop rather than wait), so that a cell that prints
 * without end costs the kernel no more memory than this. */
#define KOUT_MAX_BYTES (64u << 20)
/* The bytes of displays and results one cell sends since its output was
 * last cleared: what the notebook page (and the saved notebook) holds of
 * it. Past this, its displays are not sent, and one line on its stderr
 * says so; its stdout and stderr are each cut likewise at --max-stdout. A
 * cell's code is untrusted, and chooses how much it shows. */
#define KSHOW_MAX (64u << 20)
/* Shell requests waiting while a cell runs: past this, the kernel stops
 * reading the shell socket, and ZeroMQ holds the rest. */
#define KQUEUE_MAX 256
/* The longest line an input_reply gives input(): the pipe to the session
 * is made this large (F_SETPIPE_SZ; its default size where that fails),
 * so that the I/O thread's write of a line never waits. */
#define KINPUT_PIPE (1u << 20)
/* The line a rolled-back cell's traceback ends with. */
#define KROLLBACK_LINE                                                                             \
        "airlock: this cell failed and was rolled back: variables, imports and objects are as "    \
        "they were before it (files it wrote stay written)"

typedef struct khist {
        int line;
        char *input;
        char *output; /* the execute_result's text/plain, or NULL */
        size_t bytes; /* of both, counted against KHIST_MAX_BYTES */
} khist;

typedef struct kqueued {
        struct kqueued *next;
        kmsg msg;
        int sock;
        /* Queued when a cell failed with stop_on_error: to be answered
         * "aborted" (abort_queued). */
        bool abort;
} kqueued;

typedef struct kernel {
        kconn conn;
        char session_id[40];
        airlock_config *cfg; /* the kernel's, freed with it */
        int idle_fd;         /* the signal fd's stand-in when there is none, or -1 */
        pthread_t hb_thread; /* the heartbeat's thread ... */
        bool have_hb;        /* ... when it started */
        void *ctx, *shell, *iopub, *control, *stdin_sock, *hb;
        kreplay *replay;
        airlock_sandbox *sb;
        airlock_session *s;
        int cancel_fd; /* eventfd: an interrupt cancels the running cell */
        /* The session's standard input in prompt mode (input(), getpass):
         * the I/O thread writes an input_reply's value and a newline to
         * in_w, the library reads in_r when the cell asks. */
        int in_r, in_w;
        size_t in_max;   /* the longest line that in_w takes at once */
        bool want_input; /* an input_request is out (under lock) */
        int out_fd;      /* eventfd: the worker queued messages or finished */
        pthread_mutex_t lock;
        pthread_cond_t cond;
        kout *out_head, *out_tail; /* worker -> I/O, under lock */
        size_t out_bytes;          /* their size (under lock) */
        pthread_cond_t out_room;   /* signalled when the I/O thread took them */
        kqueued *job;              /* I/O -> worker, under lock */
        bool busy;                 /* the worker holds a job (under lock) */
        bool stop;                 /* the worker ends (under lock) */
        bool fatal;                /* the session ended: the kernel exits (under lock) */
        bool interrupted;          /* an interrupt arrived during the job (under lock) */
        bool abort_queued;         /* a cell failed with stop_on_error (under lock) */
        kqueued *pending, **pending_tail;
        size_t n_pending;
        /* The worker's own. */
        int execution_count;
        uint64_t max_stream; /* --max-stdout: a cell's stdout and stderr, each */
        khist *hist;
        size_t n_hist, hist_bytes;
        unsigned long drops;
} kernel;

static void klog(const char *fmt, ...) _printf_(1, 2);
static void klog(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fputs("airlock kernel: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
}

/* ---- the queue to the I/O thread --------------------------------------------------- */

static void wake_io(kernel *k)
{
        uint64_t one = 1;
        (void)!write(k->out_fd, &one, sizeof(one));
}

/* Queues a message for the I/O thread to send (content stolen). */
static void kpost(kernel *k, int sock, const kmsg *parent, const char *type, json_t *content)
{
        kout *o = kout_build(&k->conn, k->session_id, sock, parent, type, content);
        if (!o) {
                klog("out of memory for a %s message: not sent", type);
                return;
        }
        size_t bytes = 0;
        for (size_t i = 0; i < o->n; i++)
                bytes += o->len[i];
        pthread_mutex_lock(&k->lock);
        while (k->out_bytes && k->out_bytes + bytes > KOUT_MAX_BYTES && !k->stop)
                pthread_cond_wait(&k->out_room, &k->lock);
        k->out_bytes += bytes;
        if (k->out_tail)
                k->out_tail->next = o;
        else
                k->out_head = o;
        k->out_tail = o;
        pthread_mutex_unlock(&k->lock);
        wake_io(k);
}

static void kstatus(kernel *k, const kmsg *parent, const char *state)
{
        kpost(k, KSOCK_IOPUB, parent, "status", json_pack("{s:s}", "execution_state", state));
}

/* The reply's type: "execute_request" -> "execute_reply". */
static void reply_type(const char *req, char *buf, size_t size)
{
        size_t n = strlen(req);
        if (n > 8 && strcmp(req + n - 8, "_request") == 0)
                snprintf(buf, size, "%.*s_reply", (int)(n - 8), req);
        else
                snprintf(buf, size, "%s_reply", req);
}

static void kreply(kernel *k, const kmsg *req, int sock, json_t *content)
{
        char type[96];
        reply_type(req->msg_type, type, sizeof(type));
        kpost(k, sock, req, type, content);
}

/* ---- output of a cell ---------------------------------------------------------------- */

typedef struct kexec {
        kernel *k;
        const kmsg *req;
        bool silent;
        /* Per stream: a UTF-8 sequence cut by a chunk's end, kept for the
         * next chunk. */
        char carry[3][4];
        size_t n_carry[3];
        /* What the page was sent since the cell's output was last cleared:
         * bytes of each stream (1, 2) and of displays, and whether each was
         * cut at its cap (kernel.max_stream, KSHOW_MAX). */
        uint64_t shown[3], displayed;
        bool cut[3], displays_cut;
        /* A record in progress on stdout. */
        dynbuf rec;
        bool in_rec, rec_over;
        /* What the records said. */
        json_t *error, *user_expressions, *answer;
        char *result_plain;
} kexec;

/* How many bytes at the end of data begin a UTF-8 sequence that the next
 * chunk completes. */
static size_t utf8_cut(const char *data, size_t len)
{
        for (size_t back = 1; back <= 3 && back <= len; back++) {
                unsigned char c = (unsigned char)data[len - back];
                if ((c & 0xc0) == 0x80)
                        continue;
                size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
                return need > back ? back : 0;
        }
        return 0;
}

/* A line of the kernel's own on the cell's stderr, outside its caps. */
static void note(kexec *x, const char *line)
{
        kpost(x->k, KSOCK_IOPUB, x->req, "stream",
              json_pack("{s:s, s:s}", "name", "stderr", "text", line));
}

/* Sends what the cell wrote on stream (1 stdout, 2 stderr) as stream
 * messages, a UTF-8 sequence cut by a chunk's end kept for the next. */
static void stream_out(kexec *x, int stream, const char *data, size_t len)
{
        if (!len)
                return;
        dynbuf b;
        dynbuf_init(&b, SIZE_MAX);
        if (x->n_carry[stream])
                dynbuf_append(&b, x->carry[stream], x->n_carry[stream]);
        dynbuf_append(&b, data, len);
        size_t cut = utf8_cut(b.data, b.len);
        memcpy(x->carry[stream], b.data + b.len - cut, cut);
        x->n_carry[stream] = cut;
        size_t n = b.len - cut;
        if (n) {
                char *text = al_utf8_sanitize(b.data, n);
                if (text)
                        kpost(x->k, KSOCK_IOPUB, x->req, "stream",
                              json_pack("{s:s, s:s}", "name", stream == 1 ? "stdout" : "stderr",
                                        "text", text));
                free(text);
        }
        dynbuf_free(&b);
}

/* Contract: the page gets at most kernel.max_stream (--max-stdout) bytes
 * of each of the cell's streams since its output was last cleared: the
 * rest is dropped, with one note on stderr naming the cap. The cell's code
 * chooses how much it prints, and the page (and the saved notebook) holds
 * all of it, outside the sandbox's limits. */
static void send_stream(kexec *x, int stream, const char *data, size_t len)
{
        if (!len || x->cut[stream])
                return;
        uint64_t room = x->k->max_stream - x->shown[stream];
        bool over = len > room;
        size_t n = over ? (size_t)room : len;
        x->shown[stream] += n;
        stream_out(x, stream, data, n);
        if (!over)
                return;
        x->cut[stream] = true;
        char line[240];
        snprintf(line, sizeof(line),
                 "\n[airlock kernel: this cell's %s passed --max-stdout (%llu KiB) since its "
                 "output was last cleared; the rest is not shown]\n",
                 stream == 1 ? "stdout" : "stderr", (unsigned long long)(x->k->max_stream >> 10));
        note(x, line);
}

/* The user_expressions' values, each {"status", "data", "metadata"} (or an
 * error), with each data bundle made safe for the page (ksafe.c). */
static json_t *safe_values(const json_t *values)
{
        json_t *out = json_object();
        const char *name;
        json_t *v;
        json_object_foreach ((json_t *)values, name, v) {
                json_t *copy = json_is_object(v) ? json_copy(v) : NULL;
                json_t *data = json_object_get(copy, "data");
                if (data)
                        json_object_set_new(copy, "data", ksafe_bundle(data));
                if (copy)
                        json_object_set_new(out, name, copy);
        }
        return out;
}

/* Contract: whether a display or result of len bytes (its record's text)
 * may be sent: the cell's displays since its output was last cleared stay
 * within KSHOW_MAX; the first one past it is not sent, and one note on
 * stderr names the cap (the later ones are dropped silently). */
static bool may_show(kexec *x, size_t len)
{
        if (!x->displays_cut && len <= KSHOW_MAX - x->displayed) {
                x->displayed += len;
                return true;
        }
        if (!x->displays_cut) {
                char line[240];
                snprintf(line, sizeof(line),
                         "\n[airlock kernel: this cell's displays passed %u MiB since its output "
                         "was last cleared (KSHOW_MAX); the rest are not shown]\n",
                         KSHOW_MAX >> 20);
                note(x, line);
        }
        x->displays_cut = true;
        return false;
}

/* A display's or result's data bundle (len: its record's text) made safe
 * for the page (ksafe.c), when it may be shown (may_show), else NULL. It
 * is counted at what the page gets, which can be more than what the cell
 * wrote: made safe, each "<" of an HTML text is "&lt;", four bytes for one.
 * Counted at the record's text, a cell displaying "<" sent the page four
 * times KSHOW_MAX. */
static json_t *shown_bundle(kexec *x, const json_t *data, size_t len)
{
        if (!json_is_object(data) || x->displays_cut)
                return NULL;
        json_t *safe = ksafe_bundle(data);
        size_t sent = safe ? json_dumpb(safe, NULL, 0, JSON_COMPACT) : 0;
        if (safe && may_show(x, MAX(len, sent)))
                return safe;
        json_decref(safe);
        return NULL;
}

/* The page's output of the cell is cleared: its caps start again. */
static void shown_reset(kexec *x)
{
        memset(x->shown, 0, sizeof(x->shown));
        memset(x->cut, 0, sizeof(x->cut));
        x->displayed = 0;
        x->displays_cut = false;
}

/* Takes one record of the cell's side. Its text is within KREC_MAX, but
 * parsed it could be twenty times that (each JSON value costs jansson about
 * JSONRPC_VALUE_COST bytes, and the cell chose them all): a record whose
 * parse would cost more than KREC_MAX is measured first, without building
 * anything, and not parsed. Returns false for such a record. */
/* A display's metadata as a new reference: the record's own object, or an empty one when the
 * cell sent none or something else (the message's field must be an object). */
static json_t *display_metadata(json_t *md)
{
        return json_is_object(md) ? json_incref(md) : json_object();
}

/* The error of a cell whose displays, result and error passed KSHOW_MAX:
 * its name when short, and a traceback of one line naming the cap. The
 * cell chooses its error's text as it chooses its displays (an exception's
 * message of tens of megabytes), and the page shows it, and the notebook
 * saves it, as it does the displays: posted on iopub and in the reply, it
 * would otherwise pass the cap twice over. */
static json_t *error_cut(const json_t *r)
{
        const char *ename = json_string_value(json_object_get(r, "ename"));
        char line[200];
        snprintf(line, sizeof(line),
                 "[airlock kernel: this cell's error passed, with its displays, %u MiB since "
                 "its output was last cleared (KSHOW_MAX); its message is not shown]",
                 KSHOW_MAX >> 20);
        return json_pack("{s:s, s:s, s:[s]}", "ename",
                         ename && strlen(ename) <= 128 ? ename : "Error", "evalue", "", "traceback",
                         line);
}

static bool handle_record(kexec *x, const char *json, size_t len)
{
        uint64_t values = 0;
        unsigned depth = 0;
        jsonrpc_measure(json, len, &values, &depth);
        if (values > (KREC_MAX - len) / JSONRPC_VALUE_COST)
                return false;
        json_t *r = json_loadb(json, len, 0, NULL);
        const char *t = json_string_value(json_object_get(r, "type"));
        char type[32];
        if (!t || strlen(t) >= sizeof(type)) {
                json_decref(r);
                return true;
        }
        snprintf(type, sizeof(type), "%s", t);
        json_object_del(r, "type");
        if (strcmp(type, "display") == 0) {
                json_t *data = json_object_get(r, "data");
                json_t *md = json_object_get(r, "metadata");
                json_t *safe = shown_bundle(x, data, len);
                if (safe)
                        kpost(x->k, KSOCK_IOPUB, x->req, "display_data",
                              json_pack("{s:o, s:o, s:{}}", "data", safe, "metadata",
                                        display_metadata(md), "transient"));
        } else if (strcmp(type, "clear_output") == 0) {
                shown_reset(x);
                kpost(x->k, KSOCK_IOPUB, x->req, "clear_output",
                      json_pack("{s:b}", "wait", json_is_true(json_object_get(r, "wait"))));
        } else if (strcmp(type, "result") == 0) {
                json_t *data = json_object_get(r, "data");
                json_t *md = json_object_get(r, "metadata");
                const char *plain = json_string_value(json_object_get(data, "text/plain"));
                if (plain && !x->result_plain)
                        x->result_plain = strdup(plain);
                json_t *safe = x->silent ? NULL : shown_bundle(x, data, len);
                if (safe)
                        kpost(x->k, KSOCK_IOPUB, x->req, "execute_result",
                              json_pack("{s:i, s:o, s:o}", "execution_count", x->k->execution_count,
                                        "data", safe, "metadata", display_metadata(md)));
        } else if (strcmp(type, "error") == 0) {
                json_decref(x->error);
                x->error = may_show(x, len) ? json_incref(r) : error_cut(r);
        } else if (strcmp(type, "user_expressions") == 0) {
                json_decref(x->user_expressions);
                x->user_expressions = safe_values(json_object_get(r, "values"));
        } else {
                json_decref(x->answer);
                x->answer = json_incref(r);
        }
        json_decref(r);
        return true;
}

/* Takes the records out of the stdout bytes: text before a record's
 * "\x1e" is the cell's; from it to the newline, the record's. */
static void parse_stdout(kexec *x, const char *data, size_t len)
{
        while (len) {
                if (!x->in_rec) {
                        const char *rs = memchr(data, '\x1e', len);
                        size_t n = rs ? (size_t)(rs - data) : len;
                        send_stream(x, 1, data, n);
                        data += n;
                        len -= n;
                        if (rs) {
                                x->in_rec = true;
                                x->rec_over = false;
                                x->rec.len = 0;
                                data++;
                                len--;
                        }
                        continue;
                }
                const char *nl = memchr(data, '\n', len);
                size_t n = nl ? (size_t)(nl - data) : len;
                if (!x->rec_over && dynbuf_append(&x->rec, data, n) < 0)
                        x->rec_over = true;
                data += n;
                len -= n;
                if (!nl)
                        break;
                data++;
                len--;
                x->in_rec = false;
                size_t tag = strlen(KREC_TAG);
                bool ours =
                    !x->rec_over && x->rec.len >= tag && memcmp(x->rec.data, KREC_TAG, tag) == 0;
                if (x->rec_over ||
                    (ours && !handle_record(x, x->rec.data + tag, x->rec.len - tag))) {
                        char line[200];
                        snprintf(line, sizeof(line),
                                 "airlock kernel: a display larger than %u MiB (as text, or "
                                 "parsed at %u bytes a JSON value) was not shown\n",
                                 KREC_MAX >> 20, (unsigned)JSONRPC_VALUE_COST);
                        note(x, line);
                } else if (!ours) {
                        /* A "\x1e" of the cell's own: its text, as printed. */
                        send_stream(x, 1, "\x1e", 1);
                        send_stream(x, 1, x->rec.data, x->rec.len);
                        send_stream(x, 1, "\n", 1);
                }
        }
}

static void on_output(void *arg, int stream, const char *data, size_t len)
{
        kexec *x = arg;
        if (stream == 1)
                parse_stdout(x, data, len);
        else
                send_stream(x, 2, data, len);
}

/* The cell asks for a line (input(), getpass): an input_request on the
 * stdin channel, to the client that sent the execute_request (its routing
 * identity is the shell request's, as ipykernel sends it). The I/O thread
 * answers through the pipe when the input_reply comes. */
static void on_input(void *arg, const char *prompt, bool password)
{
        kexec *x = arg;
        pthread_mutex_lock(&x->k->lock);
        x->k->want_input = true;
        pthread_mutex_unlock(&x->k->lock);
        kpost(x->k, KSOCK_STDIN, x->req, "input_request",
              json_pack("{s:s, s:b}", "prompt", prompt, "password", password));
}

/* Before and after a cell: no answer of an earlier cell's is waited for
 * or left in the pipe. */
static void input_reset(kernel *k)
{
        char buf[4096];
        pthread_mutex_lock(&k->lock);
        k->want_input = false;
        while (read(k->in_r, buf, sizeof(buf)) > 0)
                ;
        pthread_mutex_unlock(&k->lock);
}

static void kexec_init(kexec *x, kernel *k, const kmsg *req)
{
        memset(x, 0, sizeof(*x));
        x->k = k;
        x->req = req;
        dynbuf_init(&x->rec, KREC_MAX);
}

static void kexec_free(kexec *x)
{
        dynbuf_free(&x->rec);
        json_decref(x->error);
        json_decref(x->user_expressions);
        json_decref(x->answer);
        free(x->result_plain);
}

/* ---- running code ----------------------------------------------------------------- */

static char *b64(const char *s, size_t len)
{
        size_t n;
        return al_base64_encode((const unsigned char *)s, len, &n);
}

/* Drains the cancel eventfd, so that an interrupt that came while no cell
 * ran does not cancel the next one (when a request is handed to the
 * worker). */
static void drain_cancel(kernel *k)
{
        uint64_t v;
        while (read(k->cancel_fd, &v, sizeof(v)) > 0)
                ;
}

/* The session ended (its rollback failed, or its processes were killed):
 * the kernel says so and exits, so that Jupyter offers a restart. */
static void kfatal(kernel *k, const char *why)
{
        klog("the sandbox's session ended (%s): the kernel exits; restart it", why);
        pthread_mutex_lock(&k->lock);
        k->fatal = true;
        pthread_mutex_unlock(&k->lock);
        wake_io(k);
}

/* Runs a helper (complete, inspect, is_complete) in a fork of the
 * session that is closed after it, so that nothing it does (an attribute's
 * getter that completion evaluates, say) reaches the session's state, and
 * the session's threads go on as they were. Returns the helper's record,
 * or NULL. */
static json_t *run_helper(kernel *k, const char *code)
{
        airlock_session *f = NULL;
        airlock_error err;
        if (airlock_session_fork(k->s, &f, &err) < 0) {
                klog("a helper could not fork the session: %s", err.message);
                return NULL;
        }
        kexec x;
        kexec_init(&x, k, NULL);
        airlock_result *res = NULL;
        json_t *answer = NULL;
        if (airlock_session_run(f, code, strlen(code), NULL, &res, &err) >= 0) {
                /* Only the records: a helper's own output is nobody's. */
                const char *p = res->stdout_data, *end = p + res->stdout_len;
                while (p && p < end) {
                        const char *rs = memchr(p, '\x1e', (size_t)(end - p));
                        if (!rs)
                                break;
                        const char *nl = memchr(rs, '\n', (size_t)(end - rs));
                        if (!nl)
                                break;
                        size_t tag = strlen(KREC_TAG);
                        if ((size_t)(nl - rs - 1) > tag && memcmp(rs + 1, KREC_TAG, tag) == 0)
                                handle_record(&x, rs + 1 + tag, (size_t)(nl - rs - 1 - tag));
                        p = nl + 1;
                }
                answer = json_incref(x.answer);
        } else {
                klog("a helper failed: %s", err.message);
        }
        airlock_result_free(res);
        airlock_session_close(f);
        kexec_free(&x);
        return answer;
}

/* Keeps a cell's input and output for history_request, the oldest cells
 * going first past KHIST_MAX_CELLS or KHIST_MAX_BYTES; an output that
 * alone would pass the bytes' cap is not kept (its input is). */
static void hist_add(kernel *k, const char *code, const char *plain)
{
        size_t len = strlen(code);
        size_t out = plain ? strlen(plain) : 0;
        if (len > KHIST_MAX_BYTES)
                return;
        if (out > KHIST_MAX_BYTES - len) {
                plain = NULL;
                out = 0;
        }
        while (k->n_hist &&
               (k->n_hist >= KHIST_MAX_CELLS || k->hist_bytes + len + out > KHIST_MAX_BYTES)) {
                k->hist_bytes -= k->hist[0].bytes;
                free(k->hist[0].input);
                free(k->hist[0].output);
                memmove(k->hist, k->hist + 1, --k->n_hist * sizeof(*k->hist));
        }
        if (!k->hist) {
                k->hist = calloc(KHIST_MAX_CELLS, sizeof(*k->hist));
                if (!k->hist)
                        return;
        }
        khist h = {k->execution_count, strdup(code), plain ? strdup(plain) : NULL, len + out};
        if (!h.input) {
                free(h.output);
                return;
        }
        k->hist[k->n_hist++] = h;
        k->hist_bytes += h.bytes;
}

/* Status names of a run that ended without the Python side's error record. */
static const char *status_ename(const airlock_result *res, bool interrupted)
{
        switch (res->status) {
        case AIRLOCK_STATUS_TIMEOUT:
                return "TimeoutError";
        case AIRLOCK_STATUS_MEMORY:
                return "MemoryError";
        case AIRLOCK_STATUS_KILLED:
                return interrupted ? "KeyboardInterrupt" : "Killed";
        default:
                return "CellFailed";
        }
}

/* What a cell left beside its live output: the carries and a record cut
 * short, then the figures the session returned, as the cell's display
 * after it, and a line for any other file. */
static void post_cell_output(kernel *k, const kmsg *req, kexec *x, const airlock_result *res)
{
        /* What the cell's output left in the carries and a record cut short. */
        on_output(x, 1, "", 0);
        for (int st = 1; st <= 2; st++)
                if (x->n_carry[st]) {
                        char *t = al_utf8_sanitize(x->carry[st], x->n_carry[st]);
                        x->n_carry[st] = 0;
                        if (t)
                                kpost(k, KSOCK_IOPUB, req, "stream",
                                      json_pack("{s:s, s:s}", "name", st == 1 ? "stdout" : "stderr",
                                                "text", t));
                        free(t);
                }
        /* Figures the session returned: the display of the cell, after it. */
        for (size_t i = 0; res && i < res->n_files; i++) {
                const airlock_file *f = &res->files[i];
                if (f->media_type && strcmp(f->media_type, "image/png") == 0 && f->data) {
                        size_t n;
                        char *png = al_base64_encode(f->data, f->size, &n);
                        if (png)
                                kpost(k, KSOCK_IOPUB, req, "display_data",
                                      json_pack("{s:{s:s, s:s}, s:{}, s:{}}", "data", "image/png",
                                                png, "text/plain", "<Figure>", "metadata",
                                                "transient"));
                        free(png);
                } else {
                        char line[1200];
                        snprintf(line, sizeof(line), "[%s: %s, %llu bytes]\n", f->path,
                                 f->media_type ? f->media_type : "?", (unsigned long long)f->size);
                        kpost(k, KSOCK_IOPUB, req, "stream",
                              json_pack("{s:s, s:s}", "name", "stderr", "text", line));
                }
        }
}

/* The error of a failed cell (err: the library's, when the run could not
 * be made) posted on iopub, with the traceback's last line saying that the
 * state rolled back, or that the session ended; returns the shell reply. */
static json_t *error_reply(kernel *k, const kmsg *req, const kexec *x, const airlock_result *res,
                           const airlock_error *err, bool interrupted, bool ended, int count)
{
        json_t *reply;
        const char *ename, *evalue;
        json_t *tb = json_array();
        if (x->error) {
                ename = json_string_value(json_object_get(x->error, "ename"));
                evalue = json_string_value(json_object_get(x->error, "evalue"));
                json_t *t = json_object_get(x->error, "traceback");
                size_t i;
                json_t *v;
                json_array_foreach (t, i, v)
                        if (json_is_string(v))
                                json_array_append(tb, v);
        } else if (err) {
                ename = "SandboxError";
                evalue = err->message;
                json_array_append_new(tb, json_string(err->message));
        } else {
                ename = status_ename(res, interrupted);
                evalue = res->error_message ? res->error_message : "the cell failed";
                char line[AIRLOCK_MESSAGE_MAX + 64];
                snprintf(line, sizeof(line), "%s: %s", ename, evalue);
                json_array_append_new(tb, json_string(line));
        }
        if (!ename)
                ename = "Error";
        if (!evalue)
                evalue = "";
        if (res && res->cell_state == AIRLOCK_CELL_ROLLED_BACK)
                json_array_append_new(tb, json_string(KROLLBACK_LINE));
        else if (ended)
                json_array_append_new(
                    tb, json_string("airlock: the sandbox's session ended: restart the "
                                    "kernel for a new one"));
        kpost(k, KSOCK_IOPUB, req, "error",
              json_pack("{s:s, s:s, s:O}", "ename", ename, "evalue", evalue, "traceback", tb));
        reply = json_pack("{s:s, s:i, s:s, s:s, s:O, s:{}, s:[]}", "status", "error",
                          "execution_count", count, "ename", ename, "evalue", evalue, "traceback",
                          tb, "user_expressions", "payload");
        json_decref(tb);
        return reply;
}

static void do_execute(kernel *k, const kmsg *req)
{
        json_t *c = req->content;
        const char *code = json_string_value(json_object_get(c, "code"));
        bool silent = json_is_true(json_object_get(c, "silent"));
        /* The protocol's default: a front-end that says nothing can answer. */
        json_t *as = json_object_get(c, "allow_stdin");
        bool allow_stdin = as ? json_is_true(as) : true;
        json_t *sh = json_object_get(c, "store_history");
        bool store = !silent && (sh ? json_is_true(sh) : true);
        if (!code)
                code = "";
        if (store)
                k->execution_count++;
        int count = k->execution_count;
        if (!silent)
                kpost(k, KSOCK_IOPUB, req, "execute_input",
                      json_pack("{s:s, s:i}", "code", code, "execution_count", count));
        kexec x;
        kexec_init(&x, k, req);
        x.silent = silent;
        json_t *ue = json_object_get(c, "user_expressions");
        char *ue_text = json_is_object(ue) && json_object_size(ue)
                            ? json_dumps(ue, JSON_COMPACT | JSON_ENSURE_ASCII)
                            : NULL;
        char *code64 = b64(code, strlen(code));
        char *ue64 = ue_text ? b64(ue_text, strlen(ue_text)) : strdup("");
        dynbuf cell;
        dynbuf_init(&cell, 64u << 20);
        airlock_error err = {0};
        int r = -ENOMEM;
        if (code64 && ue64 &&
            dynbuf_appendf(&cell,
                           "__import__('sys').modules['_airlock_kernel'].run(%d, '%s', '%s', %s, "
                           "%s)\n",
                           store ? count : 0, code64, ue64, silent ? "True" : "False",
                           allow_stdin ? "True" : "False") >= 0)
                r = 0;
        else
                al_error(&err, -E2BIG, NULL, "the cell is too large");
        airlock_result *res = NULL;
        bool interrupted = false;
        if (r >= 0) {
                airlock_run_options o = AIRLOCK_RUN_OPTIONS_INIT;
                o.cancel_fd = k->cancel_fd;
                o.on_output = on_output;
                o.output_arg = &x;
                if (allow_stdin) {
                        o.stdin_mode = AIRLOCK_STDIN_PROMPT;
                        o.stdin_fd = k->in_r;
                        o.on_input = on_input;
                        o.input_arg = &x;
                }
                input_reset(k);
                r = airlock_session_run(k->s, cell.data, cell.len, &o, &res, &err);
                input_reset(k);
                pthread_mutex_lock(&k->lock);
                interrupted = k->interrupted;
                pthread_mutex_unlock(&k->lock);
        }
        free(code64);
        free(ue64);
        free(ue_text);
        dynbuf_free(&cell);
        post_cell_output(k, req, &x, res);
        if (store)
                hist_add(k, code, res && res->success ? x.result_plain : NULL);
        json_t *reply;
        /* Only a session that ended ends the kernel: a cell the library
         * refused (too large, say) is an error of that cell. */
        bool ended = !airlock_session_alive(k->s);
        if (r >= 0 && res->success) {
                reply =
                    json_pack("{s:s, s:i, s:O, s:[]}", "status", "ok", "execution_count", count,
                              "user_expressions",
                              x.user_expressions ? x.user_expressions : json_object(), "payload");
        } else {
                reply =
                    error_reply(k, req, &x, res, r < 0 ? &err : NULL, interrupted, ended, count);
        }
        json_t *soe = json_object_get(c, "stop_on_error");
        if (!(r >= 0 && res->success) && (soe ? json_is_true(soe) : true)) {
                /* As ipykernel: the execute requests already queued behind
                 * a failed cell are answered "aborted", not run. Those
                 * queued by now, before the front-end has this reply: one
                 * it sends once it has read the reply runs (a front-end
                 * that sent the next cell at once saw it aborted). */
                pthread_mutex_lock(&k->lock);
                for (kqueued *q = k->pending; q; q = q->next)
                        if (strcmp(q->msg.msg_type, "execute_request") == 0)
                                q->abort = k->abort_queued = true;
                pthread_mutex_unlock(&k->lock);
        }
        kreply(k, req, KSOCK_SHELL, reply);
        if (ended)
                kfatal(k, r < 0 ? err.message : "its rollback failed");
        airlock_result_free(res);
        kexec_free(&x);
}

/* The text of a helper's request: its code and cursor, base64. */
static char *helper_code(const char *fn, const kmsg *req, const char *extra)
{
        const char *code = json_string_value(json_object_get(req->content, "code"));
        if (!code)
                code = "";
        char *c64 = b64(code, strlen(code));
        if (!c64)
                return NULL;
        json_t *pos = json_object_get(req->content, "cursor_pos");
        /* Jupyter's cursor_pos counts unicode code points, as Python's
         * indexes do. */
        long long cursor = json_is_integer(pos) ? json_integer_value(pos) : -1;
        if (cursor < 0)
                cursor = (long long)strlen(code);
        char *out = NULL;
        if (strcmp(fn, "is_complete") == 0) {
                if (asprintf(&out,
                             "__import__('sys').modules['_airlock_kernel'].is_complete('%s')\n",
                             c64) < 0)
                        out = NULL;
        } else if (asprintf(&out, "__import__('sys').modules['_airlock_kernel'].%s('%s', %lld%s)\n",
                            fn, c64, cursor, extra) < 0) {
                out = NULL;
        }
        free(c64);
        return out;
}

static void do_complete(kernel *k, const kmsg *req)
{
        char *code = helper_code("complete", req, "");
        json_t *a = code ? run_helper(k, code) : NULL;
        free(code);
        json_t *pos = json_object_get(req->content, "cursor_pos");
        json_int_t cursor = json_is_integer(pos) ? json_integer_value(pos) : 0;
        json_t *matches = json_object_get(a, "matches");
        kreply(k, req, KSOCK_SHELL,
               json_pack("{s:s, s:O, s:I, s:I, s:{}}", "status", "ok", "matches",
                         json_is_array(matches) ? matches : json_array(), "cursor_start",
                         a ? json_integer_value(json_object_get(a, "cursor_start")) : cursor,
                         "cursor_end",
                         a ? json_integer_value(json_object_get(a, "cursor_end")) : cursor,
                         "metadata"));
        json_decref(a);
}

static void do_inspect(kernel *k, const kmsg *req)
{
        json_t *dl = json_object_get(req->content, "detail_level");
        char *code = helper_code("inspect_at", req,
                                 json_is_integer(dl) && json_integer_value(dl) > 0 ? ", 1" : ", 0");
        json_t *a = code ? run_helper(k, code) : NULL;
        free(code);
        json_t *data = json_object_get(a, "data");
        kreply(k, req, KSOCK_SHELL,
               json_pack("{s:s, s:b, s:o, s:{}}", "status", "ok", "found",
                         json_is_true(json_object_get(a, "found")), "data", ksafe_bundle(data),
                         "metadata"));
        json_decref(a);
}

static void do_is_complete(kernel *k, const kmsg *req)
{
        char *code = helper_code("is_complete", req, "");
        json_t *a = code ? run_helper(k, code) : NULL;
        free(code);
        const char *status = json_string_value(json_object_get(a, "status"));
        json_t *reply = json_pack("{s:s}", "status", status ? status : "unknown");
        const char *indent = json_string_value(json_object_get(a, "indent"));
        if (status && strcmp(status, "incomplete") == 0)
                json_object_set_new(reply, "indent", json_string(indent ? indent : ""));
        kreply(k, req, KSOCK_SHELL, reply);
        json_decref(a);
}

static json_t *hist_entry(const khist *h, bool output)
{
        if (output)
                return json_pack("[i, i, [s, s?]]", 1, h->line, h->input, h->output);
        return json_pack("[i, i, s]", 1, h->line, h->input);
}

/* history_request: tail, range and search, over the cells of this
 * kernel's session (session number 1: a restarted kernel starts again). */
static void do_history(kernel *k, const kmsg *req)
{
        json_t *c = req->content;
        const char *type = json_string_value(json_object_get(c, "hist_access_type"));
        bool output = json_is_true(json_object_get(c, "output"));
        json_t *n_v = json_object_get(c, "n");
        size_t n = json_is_integer(n_v) && json_integer_value(n_v) > 0
                       ? (size_t)json_integer_value(n_v)
                       : k->n_hist;
        json_t *list = json_array();
        if (type && strcmp(type, "tail") == 0) {
                size_t from = k->n_hist > n ? k->n_hist - n : 0;
                for (size_t i = from; i < k->n_hist; i++)
                        json_array_append_new(list, hist_entry(&k->hist[i], output));
        } else if (type && strcmp(type, "range") == 0) {
                json_int_t start = json_integer_value(json_object_get(c, "start"));
                json_t *stop_v = json_object_get(c, "stop");
                json_int_t stop = json_is_integer(stop_v) ? json_integer_value(stop_v) : INT32_MAX;
                for (size_t i = 0; i < k->n_hist; i++)
                        if (k->hist[i].line >= start && k->hist[i].line < stop)
                                json_array_append_new(list, hist_entry(&k->hist[i], output));
        } else if (type && strcmp(type, "search") == 0) {
                const char *pattern = json_string_value(json_object_get(c, "pattern"));
                bool unique = json_is_true(json_object_get(c, "unique"));
                if (!pattern)
                        pattern = "*";
                /* The last n matches, oldest first. */
                size_t found = 0;
                size_t *idx = calloc(k->n_hist ? k->n_hist : 1, sizeof(size_t));
                for (size_t i = k->n_hist; idx && i-- > 0 && found < n;) {
                        if (fnmatch(pattern, k->hist[i].input, 0) != 0)
                                continue;
                        bool dup = false;
                        for (size_t j = 0; unique && j < found; j++)
                                dup = dup || strcmp(k->hist[idx[j]].input, k->hist[i].input) == 0;
                        if (!dup)
                                idx[found++] = i;
                }
                for (size_t j = found; idx && j-- > 0;)
                        json_array_append_new(list, hist_entry(&k->hist[idx[j]], output));
                free(idx);
        }
        kreply(k, req, KSOCK_SHELL, json_pack("{s:s, s:o}", "status", "ok", "history", list));
}

/* An execute_request under a server span (docs/tracing.md), the parent of
 * the cell's run: the worker's current span while it runs. A traceparent
 * (and tracestate, baggage) in the request's metadata is its parent. */
static void traced_execute(kernel *k, const kmsg *req)
{
        if (!al_trace_on()) {
                do_execute(k, req);
                return;
        }
        al_trace_ctx parent;
        const json_t *md = req->metadata;
        al_trace_parse(json_string_value(json_object_get(md, "traceparent")),
                       json_string_value(json_object_get(md, "tracestate")),
                       json_string_value(json_object_get(md, "baggage")), &parent);
        al_span *span = al_span_start("execute_request", AL_SPAN_SERVER, &parent);
        al_span_set_str(span, "jupyter.msg_type", "execute_request");
        al_span *outer = al_span_push(span);
        do_execute(k, req);
        al_span_pop(outer);
        al_span_end(span);
}

/* One shell request, on the worker: busy, the answer, idle. */
static void worker_job(kernel *k, const kmsg *req)
{
        const char *t = req->msg_type;
        kstatus(k, req, "busy");
        if (strcmp(t, "execute_request") == 0)
                traced_execute(k, req);
        else if (strcmp(t, "complete_request") == 0)
                do_complete(k, req);
        else if (strcmp(t, "inspect_request") == 0)
                do_inspect(k, req);
        else if (strcmp(t, "is_complete_request") == 0)
                do_is_complete(k, req);
        else if (strcmp(t, "history_request") == 0)
                do_history(k, req);
        kstatus(k, req, "idle");
}

static void *worker_main(void *arg)
{
        kernel *k = arg;
        pthread_mutex_lock(&k->lock);
        for (;;) {
                while (!k->job && !k->stop)
                        pthread_cond_wait(&k->cond, &k->lock);
                if (k->stop)
                        break;
                kqueued *q = k->job;
                bool fatal = k->fatal;
                pthread_mutex_unlock(&k->lock);
                if (!fatal)
                        worker_job(k, &q->msg);
                kmsg_free(&q->msg);
                free(q);
                pthread_mutex_lock(&k->lock);
                k->job = NULL;
                k->busy = false;
                wake_io(k);
        }
        pthread_mutex_unlock(&k->lock);
        return NULL;
}

/* ---- the heartbeat ------------------------------------------------------------------- */

static void *hb_main(void *arg)
{
        void *hb = arg;
        for (;;) {
                zmq_msg_t m;
                kz.msg_init(&m);
                if (kz.msg_recv(&m, hb, 0) < 0) {
                        kz.msg_close(&m);
                        if (kz.errno_() == EINTR)
                                continue;
                        break; /* ETERM: the context ends */
                }
                /* REP sends back what it got: one frame, capped by the
                 * socket's ZMQ_MAXMSGSIZE. */
                size_t n = kz.msg_size(&m);
                kz.send(hb, kz.msg_data(&m), n, 0);
                kz.msg_close(&m);
        }
        kz.close(hb);
        return NULL;
}

/* ---- the I/O thread -------------------------------------------------------------------- */

/* Messages answered on the I/O thread, at once, whatever the worker does:
 * they need no session. */
static json_t *kernel_info(void)
{
        return json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s, s:s, s:s, s:s, s:s, s:s}, s:s, "
                         "s:[{s:s, s:s}, {s:s, s:s}]}",
                         "status", "ok", "protocol_version", "5.3", "implementation", "airlock",
                         "implementation_version", AIRLOCK_VERSION, "language_info", "name",
                         "python", "version", PY_VERSION, "mimetype", "text/x-python",
                         "file_extension", ".py", "pygments_lexer", "ipython3", "codemirror_mode",
                         "python", "nbconvert_exporter", "python", "banner",
                         "airlock " AIRLOCK_VERSION
                         ": Python in an airlock sandbox. Every cell runs isolated from the host, "
                         "and a cell that fails is rolled back: the state is as before it.",
                         "help_links", "text", "airlock: Jupyter", "url",
                         "https://github.com/airlock/airlock/blob/main/docs/jupyter.md", "text",
                         "Python", "url", "https://docs.python.org/3/");
}

static void send_now(kernel *k, kout *o)
{
        if (!o)
                return;
        void *sock = o->sock == KSOCK_SHELL     ? k->shell
                     : o->sock == KSOCK_IOPUB   ? k->iopub
                     : o->sock == KSOCK_CONTROL ? k->control
                                                : k->stdin_sock;
        int r = kout_send(sock, o);
        if (r < 0 && r != -EHOSTUNREACH)
                klog("a message could not be sent: %s", kz.strerror(-r));
        kout_free(o);
}

/* Sends what the worker queued, in its order. */
static void flush_out(kernel *k)
{
        uint64_t v;
        (void)!read(k->out_fd, &v, sizeof(v));
        pthread_mutex_lock(&k->lock);
        kout *o = k->out_head;
        k->out_head = k->out_tail = NULL;
        k->out_bytes = 0;
        pthread_cond_broadcast(&k->out_room);
        pthread_mutex_unlock(&k->lock);
        while (o) {
                kout *next = o->next;
                send_now(k, o);
                o = next;
        }
}

static void io_reply(kernel *k, const kmsg *req, int sock, json_t *content)
{
        char type[96];
        reply_type(req->msg_type, type, sizeof(type));
        send_now(k, kout_build(&k->conn, k->session_id, KSOCK_IOPUB, req, "status",
                               json_pack("{s:s}", "execution_state", "busy")));
        send_now(k, kout_build(&k->conn, k->session_id, sock, req, type, content));
        send_now(k, kout_build(&k->conn, k->session_id, KSOCK_IOPUB, req, "status",
                               json_pack("{s:s}", "execution_state", "idle")));
}

static void log_drop(kernel *k, const char *channel, const char *why)
{
        /* One line per dropped message, up to a cap, so that a flood of
         * them cannot fill the log. */
        if (++k->drops <= 1000)
                klog("dropped %s on the %s channel", why, channel);
        else if (k->drops == 1001)
                klog("dropped more than 1000 messages: no more are logged");
}

/* Handles a message on the I/O thread; true when the kernel shuts down. */
static bool io_message(kernel *k, kqueued *q, bool *restart)
{
        const char *t = q->msg.msg_type;
        int sock = q->sock;
        if (strcmp(t, "kernel_info_request") == 0) {
                io_reply(k, &q->msg, sock, kernel_info());
        } else if (strcmp(t, "comm_info_request") == 0) {
                io_reply(k, &q->msg, sock, json_pack("{s:s, s:{}}", "status", "ok", "comms"));
        } else if (strcmp(t, "comm_open") == 0) {
                /* A kernel without comms closes every comm opened to it. */
                json_t *id = json_object_get(q->msg.content, "comm_id");
                if (json_is_string(id))
                        send_now(k, kout_build(&k->conn, k->session_id, KSOCK_IOPUB, &q->msg,
                                               "comm_close",
                                               json_pack("{s:O, s:{}}", "comm_id", id, "data")));
        } else if (strcmp(t, "comm_msg") == 0 || strcmp(t, "comm_close") == 0) {
                /* To a comm that does not exist: nothing to do. */
        } else if (strcmp(t, "interrupt_request") == 0) {
                pthread_mutex_lock(&k->lock);
                bool running = k->busy;
                if (running)
                        k->interrupted = true;
                pthread_mutex_unlock(&k->lock);
                if (running) {
                        uint64_t one = 1;
                        (void)!write(k->cancel_fd, &one, sizeof(one));
                }
                io_reply(k, &q->msg, sock,
                         json_pack("{s:s, s:s}", "status", "ok", "airlock",
                                   running ? "the running cell is cancelled: it rolls back, and "
                                             "the state is as before it"
                                           : "no cell was running"));
        } else if (strcmp(t, "shutdown_request") == 0) {
                *restart = json_is_true(json_object_get(q->msg.content, "restart"));
                io_reply(k, &q->msg, sock,
                         json_pack("{s:s, s:b}", "status", "ok", "restart", *restart));
                return true;
        } else if (sock == KSOCK_SHELL &&
                   (strcmp(t, "execute_request") == 0 || strcmp(t, "complete_request") == 0 ||
                    strcmp(t, "inspect_request") == 0 || strcmp(t, "is_complete_request") == 0 ||
                    strcmp(t, "history_request") == 0)) {
                /* The worker's: queued, in order. Under the lock: a cell
                 * that fails marks what is queued then (do_execute). */
                q->next = NULL;
                pthread_mutex_lock(&k->lock);
                *k->pending_tail = q;
                k->pending_tail = &q->next;
                k->n_pending++;
                pthread_mutex_unlock(&k->lock);
                return false;
        } else {
                klog("ignored a message of unknown type \"%.64s\" on the %s channel", t,
                     sock == KSOCK_SHELL ? "shell" : "control");
        }
        kmsg_free(&q->msg);
        free(q);
        return false;
}

/* The stdin channel: an input_reply answers the cell's input_request
 * (its value and a newline go to the session's standard input, cut at the
 * pipe's size, with a log line); anything else, or a reply nobody waits
 * for, is dropped. */
static void io_stdin(kernel *k)
{
        airlock_error err = {0};
        kmsg m;
        int r;
        while ((r = kmsg_recv(k->stdin_sock, &k->conn, k->replay, &m, &err)) != -EAGAIN) {
                if (r < 0) {
                        log_drop(k, "stdin", err.message);
                        continue;
                }
                const char *value = json_string_value(json_object_get(m.content, "value"));
                pthread_mutex_lock(&k->lock);
                bool want = k->want_input && strcmp(m.msg_type, "input_reply") == 0 && value;
                if (want) {
                        /* One line: input() returns up to the first newline. */
                        size_t n = strcspn(value, "\n");
                        if (n >= k->in_max) {
                                klog("an input_reply of %zu bytes was cut at %zu", n,
                                     k->in_max - 1);
                                n = k->in_max - 1;
                        }
                        k->want_input = false;
                        (void)!write(k->in_w, value, n);
                        (void)!write(k->in_w, "\n", 1);
                }
                pthread_mutex_unlock(&k->lock);
                if (!want)
                        klog("ignored a message of type \"%.64s\" on the stdin channel",
                             m.msg_type);
                kmsg_free(&m);
        }
}

/* Answers the execute requests that were queued when a cell failed with
 * stop_on_error (marked abort): "aborted", as ipykernel does; the others
 * stay queued. */
static void abort_queued(kernel *k)
{
        kqueued **at = &k->pending;
        while (*at) {
                kqueued *q = *at;
                if (!q->abort) {
                        at = &q->next;
                        continue;
                }
                *at = q->next;
                k->n_pending--;
                io_reply(k, &q->msg, KSOCK_SHELL, json_pack("{s:s}", "status", "aborted"));
                kmsg_free(&q->msg);
                free(q);
        }
        k->pending_tail = at;
}

/* Gives the next queued request to the worker when it is idle. */
static void feed_worker(kernel *k)
{
        pthread_mutex_lock(&k->lock);
        if (!k->busy && k->abort_queued) {
                k->abort_queued = false;
                pthread_mutex_unlock(&k->lock);
                abort_queued(k);
                pthread_mutex_lock(&k->lock);
        }
        if (!k->busy && k->pending) {
                kqueued *q = k->pending;
                k->pending = q->next;
                if (!k->pending)
                        k->pending_tail = &k->pending;
                k->n_pending--;
                /* An interrupt from before this request is spent; one
                 * from now on cancels it, even before its cell starts. */
                drain_cancel(k);
                k->interrupted = false;
                k->job = q;
                k->busy = true;
                pthread_cond_signal(&k->cond);
        }
        pthread_mutex_unlock(&k->lock);
}

static void *bind_socket(kernel *k, int type, int port, airlock_error *err)
{
        void *s = kz.socket(k->ctx, type);
        if (!s) {
                al_error(err, -EIO, NULL, "zmq_socket: %s", kz.strerror(kz.errno_()));
                return NULL;
        }
        int linger = 1000;
        int64_t max = KWIRE_MAX_BYTES;
        kz.setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
        kz.setsockopt(s, ZMQ_MAXMSGSIZE, &max, sizeof(max));
        char ep[320];
        kconn_endpoint(&k->conn, port, ep, sizeof(ep));
        if (kz.bind(s, ep) < 0) {
                al_error(err, -EADDRINUSE, NULL, "cannot bind %s: %s", ep,
                         kz.strerror(kz.errno_()));
                kz.close(s);
                return NULL;
        }
        return s;
}

/* The session's first cell: the Python side, as module _airlock_kernel. */
static int load_driver(kernel *k, airlock_error *err)
{
        char *src64 = b64(kdriver_src, strlen(kdriver_src));
        char *cell = NULL;
        if (!src64 || asprintf(&cell,
                               "__import__('sys').modules['_airlock_kernel'] = "
                               "__import__('types').ModuleType('_airlock_kernel')\n"
                               "exec(compile(__import__('base64').b64decode('%s').decode(), "
                               "'<airlock-kernel>', 'exec'), "
                               "__import__('sys').modules['_airlock_kernel'].__dict__)\n"
                               "__import__('sys').modules['_airlock_kernel']._install()\n",
                               src64) < 0) {
                free(src64);
                return al_error(err, -ENOMEM, NULL, "out of memory");
        }
        free(src64);
        airlock_result *res = NULL;
        int r = airlock_session_run(k->s, cell, strlen(cell), NULL, &res, err);
        free(cell);
        if (r >= 0 && !res->success)
                r = al_error(err, -EIO, NULL, "the kernel's Python side did not load: %.*s",
                             (int)MIN(res->stderr_len, 600),
                             res->stderr_data ? res->stderr_data : "");
        airlock_result_free(res);
        return r;
}

/* The I/O thread's loop: the control and shell channels (each a bounded
 * batch per wake, so that one cannot starve the other; the shell waits
 * while the worker's queue is full), stdin (the input_reply a cell waits
 * for, io_stdin), the worker's output and the signals (SIGINT
 * interrupts the cell, SIGTERM and SIGHUP end the kernel). Returns the
 * exit status once a shutdown, a signal or the session's end stops it;
 * *restart says whether Jupyter asked for a restart. */
static int io_loop(kernel *k, int sig_fd, bool *restart)
{
        airlock_error err = {0};
        int status = 0;
        bool quit = false;
        int r;
        while (!quit) {
                zmq_pollitem_t items[5] = {
                    {.socket = k->control, .events = ZMQ_POLLIN},
                    {.socket = k->stdin_sock, .events = ZMQ_POLLIN},
                    {.fd = k->out_fd, .events = ZMQ_POLLIN},
                    {.fd = sig_fd, .events = ZMQ_POLLIN},
                    {.socket = k->shell, .events = ZMQ_POLLIN},
                };
                /* The shell waits while the queue is full. */
                int n_items = k->n_pending < KQUEUE_MAX ? 5 : 4;
                if (kz.poll(items, n_items, -1) < 0) {
                        if (kz.errno_() == EINTR)
                                continue;
                        klog("zmq_poll: %s", kz.strerror(kz.errno_()));
                        status = 1;
                        break;
                }
                if (items[2].revents)
                        flush_out(k);
                pthread_mutex_lock(&k->lock);
                bool fatal = k->fatal;
                pthread_mutex_unlock(&k->lock);
                if (fatal) {
                        flush_out(k);
                        status = 1;
                        break;
                }
                if (items[3].revents) {
                        /* SIGINT (a terminal's Ctrl-C reaches the whole
                         * process group) interrupts the cell, as an
                         * interrupt_request does; SIGTERM and SIGHUP end
                         * the kernel. */
                        unsigned char sig = 0;
                        bool end = false;
                        while (read(sig_fd, &sig, 1) == 1)
                                if (sig == SIGINT) {
                                        uint64_t one = 1;
                                        (void)!write(k->cancel_fd, &one, sizeof(one));
                                } else {
                                        end = true;
                                }
                        if (end) {
                                klog("signal %d: the kernel shuts down", sig);
                                break;
                        }
                }
                if (items[1].revents)
                        io_stdin(k);
                for (int i = 0; i < n_items && !quit; i++) {
                        if (i != 0 && i != 4)
                                continue;
                        if (!(items[i].revents & ZMQ_POLLIN))
                                continue;
                        void *sock = i == 0 ? k->control : k->shell;
                        const char *name = i == 0 ? "control" : "shell";
                        /* A bounded batch per wake, so that one channel
                         * cannot starve the other. */
                        for (int batch = 0; batch < 64 && !quit; batch++) {
                                kqueued *q = calloc(1, sizeof(*q));
                                if (!q)
                                        break;
                                r = kmsg_recv(sock, &k->conn, k->replay, &q->msg, &err);
                                if (r == -EAGAIN) {
                                        free(q);
                                        break;
                                }
                                if (r < 0) {
                                        free(q);
                                        log_drop(k, name, err.message);
                                        continue;
                                }
                                q->sock = i == 0 ? KSOCK_CONTROL : KSOCK_SHELL;
                                quit = io_message(k, q, restart);
                                if (i == 4 && k->n_pending >= KQUEUE_MAX)
                                        break;
                        }
                }
                feed_worker(k);
        }
        return status;
}

/* Everything the kernel holds, after the worker has ended: the requests
 * still queued, the sockets, the ZeroMQ context (whose end stops the
 * heartbeat thread hb, when it runs), the session and its sandbox, the
 * history. */
static void kernel_free(kernel *k, pthread_t *hb)
{
        bool have_hb = hb != NULL;
        while (k->pending) {
                kqueued *q = k->pending;
                k->pending = q->next;
                kmsg_free(&q->msg);
                free(q);
        }
        if (k->shell)
                kz.close(k->shell);
        if (k->control)
                kz.close(k->control);
        if (k->stdin_sock)
                kz.close(k->stdin_sock);
        if (k->iopub)
                kz.close(k->iopub);
        if (k->ctx) {
                /* Ends the heartbeat's recv with ETERM; it closes its socket. */
                if (!k->hb || !have_hb)
                        if (k->hb)
                                kz.close(k->hb);
                kz.ctx_term(k->ctx);
        }
        if (have_hb)
                pthread_join(*hb, NULL);
        airlock_session_close(k->s);
        airlock_sandbox_close(k->sb);
        for (size_t i = 0; i < k->n_hist; i++) {
                free(k->hist[i].input);
                free(k->hist[i].output);
        }
        free(k->hist);
        kreplay_free(k->replay);
        kconn_free(&k->conn);
        if (k->in_r >= 0)
                close(k->in_r);
        if (k->in_w >= 0)
                close(k->in_w);
}

/* The kernel's own state beside its session: the session id of its
 * messages, the worker's cancel and output eventfds, the replay memory,
 * the lock and queues shared by its threads. */
static void kernel_init(kernel *k)
{
        unsigned char rnd[16];
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
                memset(rnd, 0x5a, sizeof(rnd));
        for (size_t i = 0; i < sizeof(rnd); i++)
                snprintf(k->session_id + 2 * i, 3, "%02x", rnd[i]);
        k->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        int in[2] = {-1, -1};
        if (pipe2(in, O_CLOEXEC | O_NONBLOCK) == 0) {
                int size = fcntl(in[1], F_SETPIPE_SZ, (int)KINPUT_PIPE);
                if (size < 0)
                        size = fcntl(in[1], F_GETPIPE_SZ);
                k->in_max = size > 1 ? (size_t)size : 1;
        }
        k->in_r = in[0];
        k->in_w = in[1];
        k->out_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        k->replay = kreplay_new();
        pthread_mutex_init(&k->lock, NULL);
        pthread_cond_init(&k->cond, NULL);
        pthread_cond_init(&k->out_room, NULL);
        k->pending_tail = &k->pending;
}

int kernel_service_new(airlock_config *cfg, const char *conn_file, kernel **ret, airlock_error *err)
{
        kernel *k = calloc(1, sizeof(*k));
        *ret = k;
        if (!k) {
                airlock_config_free(cfg);
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -ENOMEM, NULL, "out of memory");
        }
        k->cfg = cfg;
        k->cancel_fd = k->out_fd = k->idle_fd = k->in_r = k->in_w = -1;
        airlock_limits l;
        airlock_limits_init(&l, sizeof(l));
        airlock_config_get_limits(cfg, &l);
        k->max_stream = l.max_stdout;
        int r = kconn_load(conn_file, &k->conn, err);
        if (r >= 0)
                r = kzmq_open(err);
        if (r < 0)
                return r;
        if (!k->conn.key_len)
                klog("warning: the connection file has no key: messages are not signed, and "
                     "anyone who can reach the ports can run cells");
        /* The sandbox and its session before the sockets: a kernel that
         * answers kernel_info can run cells. */
        r = airlock_sandbox_new(cfg, &k->sb, err);
        if (r >= 0)
                r = airlock_session_open(k->sb, &k->s, err);
        if (r >= 0)
                r = load_driver(k, err);
        return r;
}

const char *kernel_service_warnings(const kernel *k)
{
        return k->sb ? airlock_sandbox_warnings(k->sb) : NULL;
}

/* Binds the five sockets of the connection file. */
static int bind_sockets(kernel *k, airlock_error *err)
{
        if (!(k->shell = bind_socket(k, ZMQ_ROUTER, k->conn.shell_port, err)) ||
            !(k->control = bind_socket(k, ZMQ_ROUTER, k->conn.control_port, err)) ||
            !(k->stdin_sock = bind_socket(k, ZMQ_ROUTER, k->conn.stdin_port, err)) ||
            !(k->iopub = bind_socket(k, ZMQ_PUB, k->conn.iopub_port, err)) ||
            !(k->hb = bind_socket(k, ZMQ_REP, k->conn.hb_port, err)))
                return al_error_as(err, AIRLOCK_ERROR_INPUT, err->code ? err->code : -EIO);
        return 0;
}

/* A cell in progress is cancelled (it rolls back), then the worker ends. */
static void stop_worker(kernel *k, pthread_t *worker)
{
        uint64_t one = 1;
        (void)!write(k->cancel_fd, &one, sizeof(one));
        pthread_mutex_lock(&k->lock);
        k->stop = true;
        pthread_cond_signal(&k->cond);
        pthread_cond_broadcast(&k->out_room);
        pthread_mutex_unlock(&k->lock);
        if (worker)
                pthread_join(*worker, NULL);
        flush_out(k);
}

int kernel_service_run(kernel *k, int sig_fd, airlock_error *err)
{
        kernel_init(k);
        if (sig_fd < 0) /* no signal pipe: a descriptor that never wakes the poll */
                sig_fd = k->idle_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        k->ctx = kz.ctx_new();
        if (k->cancel_fd < 0 || k->out_fd < 0 || k->in_r < 0 || !k->replay || !k->ctx) {
                int e = errno ? errno : ENOMEM;
                return al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -e, NULL, "cannot start: %s",
                                     strerror(e));
        }
        int r = bind_sockets(k, err);
        if (r < 0)
                return r;
        pthread_t worker;
        bool have_worker = pthread_create(&worker, NULL, worker_main, k) == 0;
        k->have_hb = pthread_create(&k->hb_thread, NULL, hb_main, k->hb) == 0;
        if (!have_worker || !k->have_hb) {
                r = al_error_kind(err, AIRLOCK_ERROR_SANDBOX, -EAGAIN, NULL,
                                  "cannot start its threads");
        } else {
                bool restart = false;
                send_now(k, kout_build(&k->conn, k->session_id, KSOCK_IOPUB, NULL, "status",
                                       json_pack("{s:s}", "execution_state", "starting")));
                r = io_loop(k, sig_fd, &restart);
                if (restart)
                        klog("restart requested: the kernel exits, and Jupyter starts a new one "
                             "with a fresh session");
        }
        stop_worker(k, have_worker ? &worker : NULL);
        return r;
}

void kernel_service_free(kernel *k)
{
        if (!k)
                return;
        kernel_free(k, k->have_hb ? &k->hb_thread : NULL);
        if (k->idle_fd >= 0)
                close(k->idle_fd);
        airlock_config_free(k->cfg);
        free(k);
}
