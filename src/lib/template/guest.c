/* The embedded CPython of the template and its copies. Python is initialised
 * once per sandbox, in the template; every run is a copy-on-write fork of
 * that initialised interpreter. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <marshal.h>

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/channel.h"
#include "template/guest_heap.h"
#include "template/template.h"
#include "core/util.h"

extern const unsigned char guest_runtime_py[];
extern const unsigned long guest_runtime_py_len;
/* The same source compiled at build time (scripts/embed_runtime.sh): the
 * magic number of its bytecode, 4 bytes, then the marshalled code object;
 * empty when the build had no Python of the embedded version. */
extern const unsigned char guest_runtime_pyc[];
extern const unsigned long guest_runtime_pyc_len;

/* Where glibc keeps the calling thread's id (struct pthread's tid), found
 * in the template (find_tid_slot); NULL when it could not be found. */
static pid_t *tid_slot;

static PyObject *runtime_run;            /* runtime._run */
static PyObject *runtime_after_fork;     /* runtime._after_fork */
static PyObject *runtime_build;          /* runtime._build_caches */
static PyObject *runtime_after_preloads; /* runtime._after_preloads */
static PyObject *runtime_set_stdin;      /* runtime._set_stdin */
static PyObject *runtime_settle;         /* runtime._settle_template */
static int channel_fd = -1;
static bool session_mode; /* runs share one __main__ */
/* One request at a time on the channel, whatever the guest's threads do. */
static pthread_mutex_t channel_lock = PTHREAD_MUTEX_INITIALIZER;

/* How long the guest polls for a reply before it sleeps: most host
 * replies (a C tool, a validation error) come back within this, and a
 * reply found while polling saves a sleep and a cross-CPU wake-up. After a
 * spin that ran out, the next replies are waited for asleep (channel_spin). */
#define REPLY_SPIN_NS 30000

/* Reads one reply frame from the host: first without blocking for up to
 * REPLY_SPIN_NS, then blocking. The host sends exactly one frame per
 * request, so a read never takes bytes of anything else; sizes are capped
 * all the same. Returns a malloc'd body. */
static char *read_reply(int fd, size_t *ret_len)
{
        static char first[65536]; /* under channel_lock */
        ssize_t n = -1;
        static channel_spin spin; /* under channel_lock */
        bool spinning = channel_spin_wanted(&spin);
        uint64_t until = al_now_ns() + REPLY_SPIN_NS;
        errno = EAGAIN;
        while (spinning) {
                n = recv(fd, first, sizeof(first), MSG_DONTWAIT);
                if (n >= 0 || (errno != EAGAIN && errno != EINTR))
                        break;
                if (al_now_ns() >= until) {
                        channel_spin_expired(&spin);
                        break;
                }
        }
        while (n < 0 && (errno == EAGAIN || errno == EINTR))
                n = recv(fd, first, sizeof(first), 0);
        if (n <= 0)
                return NULL;
        size_t have = (size_t)n;
        if (have < 4 && al_read_full(fd, first + have, 4 - have) != (ssize_t)(4 - have))
                return NULL;
        if (have < 4)
                have = 4;
        const unsigned char *h = (const unsigned char *)first;
        uint32_t len =
            (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
        if (len > CHANNEL_MAX_FRAME || have - 4 > len)
                return NULL;
        char *body = malloc((size_t)len + 1);
        if (!body)
                return NULL;
        memcpy(body, first + 4, have - 4);
        size_t rest = len - (have - 4);
        if (rest && al_read_full(fd, body + (have - 4), rest) != (ssize_t)rest) {
                free(body);
                return NULL;
        }
        body[len] = '\0';
        *ret_len = len;
        return body;
}

/* ---- pid 1 of a single run ------------------------------------------
 *
 * A single run's interpreter is pid 1 of its PID namespace, and the kernel
 * delivers to pid 1 no signal sent from inside the namespace whose
 * disposition is the default: os.kill(os.getpid(), SIGTERM), abort()'s
 * SIGABRT and even SIGKILL would be dropped, and the run would go on. So
 * while it serves a single run, the copy catches each signal whose default
 * is to end the process (guest_init_signals), and ends the run as that
 * signal would have: it tells the host which signal in an "end" frame
 * (WIRE_KEY_SIGNAL) and exits with 128 + N, which the host reports as the
 * run ended by signal N (run.c, run_reap). SIGKILL cannot be caught: the
 * runtime's wrappers of os.kill and friends end the run the same way after
 * a SIGKILL the code sent itself (_airlock.exit_by_signal). */

/* The signals caught: every one whose default action ends the process,
 * but SIGKILL and SIGSTOP (which cannot be caught), SIGINT (Python's own
 * handler raises KeyboardInterrupt), SIGPIPE and SIGXFSZ (Python ignores
 * them), and the signals of faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
 * SIGTRAP, SIGSYS): the kernel forces those on pid 1 too. */
static const int init_signals[] = {SIGHUP,  SIGQUIT, SIGABRT,   SIGUSR1, SIGUSR2,
                                   SIGALRM, SIGTERM, SIGSTKFLT, SIGXCPU, SIGVTALRM,
                                   SIGPROF, SIGIO,   SIGPWR};
static volatile sig_atomic_t init_signals_on;
/* Whether this process inherited the handlers from the template
 * (guest_install_init_signals), so that a copy need only turn them on. */
static bool init_signals_installed;

/* Contract: async-signal-safe. Ends the single run as signal sig would
 * have ended it: the "end" frame naming sig, when no thread is in the
 * middle of a request on the channel (channel_lock is free; it is then
 * never released, so nothing else is written after the frame), then exit
 * 128 + sig. With the channel busy there is no frame, and the run ends
 * with the exit status 128 + sig alone. */
_Noreturn static void exit_by_signal(int sig)
{
        if (channel_fd >= 0 && pthread_mutex_trylock(&channel_lock) == 0)
                (void)channel_send_end(channel_fd, WIRE_STATUS_ERROR, 128 + sig, sig, false);
        _exit(128 + sig);
}

/* Contract: async-signal-safe. Called from the handler of sig: sig takes
 * its default action in this thread once the handler returns, as it would
 * have without the handler (it is sent again, unblocked, with the default
 * disposition). */
static void raise_by_default(int sig)
{
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, NULL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        syscall(SYS_tgkill, syscall(SYS_getpid), syscall(SYS_gettid), sig);
}

/* The handler of init_signals. In pid 1 of a single run it ends the run;
 * in any other process (one the code forked, which inherited it) the
 * signal takes its default action, as it would have without the handler. */
static void on_init_signal(int sig)
{
        if (init_signals_on && syscall(SYS_getpid) == 1)
                exit_by_signal(sig);
        raise_by_default(sig);
}

/* Puts on_init_signal (on) or the default (off) in place of the other
 * for every signal of init_signals and every real-time signal. Only a
 * default disposition is replaced (a preload may have set its own
 * handler). */
static void swap_init_handlers(bool on)
{
        struct sigaction sa = {.sa_handler = on ? on_init_signal : SIG_DFL,
                               .sa_flags = on ? SA_RESTART : 0};
        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < ARRAY_SIZE(init_signals); i++) {
                struct sigaction old;
                if (sigaction(init_signals[i], NULL, &old) == 0 &&
                    old.sa_handler == (on ? SIG_DFL : on_init_signal))
                        sigaction(init_signals[i], &sa, NULL);
        }
        for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++) {
                struct sigaction old;
                if (sigaction(sig, NULL, &old) == 0 &&
                    old.sa_handler == (on ? SIG_DFL : on_init_signal))
                        sigaction(sig, &sa, NULL);
        }
}

void guest_install_init_signals(void)
{
        /* Off until a copy turns them on: in the template, a probe or a
         * process the code forked, on_init_signal gives the default. */
        init_signals_on = false;
        swap_init_handlers(true);
        init_signals_installed = true;
}

void guest_init_signals(bool on)
{
        /* The dispositions came with the fork: the template installed
         * them after its interpreter and preloads were set up, as a copy
         * would have, and only the template's own code ran since. */
        if (on && init_signals_installed) {
                init_signals_on = true;
                return;
        }
        init_signals_on = on;
        swap_init_handlers(on);
        init_signals_installed = false;
}

void guest_end_of_run(void)
{
        /* The end frame is the last frame: a signal from now on finds the
         * channel taken and writes none (exit_by_signal). */
        pthread_mutex_lock(&channel_lock);
}

/* ---- a refused BLAS buffer -------------------------------------------
 *
 * OpenBLAS cannot take no for an answer: when the kernel refuses the
 * mapping of a buffer (128 MiB on Debian 12, a thread's first product),
 * and then malloc of the same, blas_memory_alloc tries both again, for
 * ever, at full speed. Without a cgroup the memory limit is RLIMIT_DATA,
 * which refuses exactly such reservations, so a product over the limit
 * spun until the time limit ended it as "timeout". Each refusal is
 * followed by mbind on MAP_FAILED (alloc_mmap binds what it mapped without
 * looking whether the mapping failed), a call nothing else makes: the
 * seccomp filter turns it into SIGSYS (seccomp.c), and this handler ends
 * the run as over its memory limit, as the OOM killer ends it where the
 * cgroup is the limit. */

/* The process whose guest_run is under way (0 between runs): only it
 * speaks for the run on the channel; a process the code forked inherits
 * the channel but not the run. */
static volatile pid_t run_owner;

/* si_code of a SIGSYS raised by a seccomp filter (the kernel's
 * asm-generic/siginfo.h, which glibc's headers do not include). */
#ifndef SYS_SECCOMP
#define SYS_SECCOMP 1
#endif

/* Contract: async-signal-safe. A SIGSYS other than the filter's mark of a
 * refused BLAS buffer takes its default action (the process ends, as
 * without the handler). The mark ends the process: in the run's own
 * process, after an "end" frame with status "memory" when no thread is in
 * the middle of a request (as exit_by_signal); in a session that process
 * then waits, frame sent, for the host to roll the cell back, which kills
 * it; a process the code forked ends by SIGKILL, as the OOM killer would
 * end it. The interpreter's unflushed output is lost, as it is then. */
static void on_sigsys(int sig, siginfo_t *si, void *ctx)
{
        (void)ctx;
        pid_t self = (pid_t)syscall(SYS_getpid);
        if (si->si_code != SYS_SECCOMP || si->si_syscall != __NR_mbind) {
                raise_by_default(sig);
                return;
        }
        static const char msg[] = "MemoryError: the run exceeded its memory limit "
                                  "(OpenBLAS was refused the memory for its buffer)\n";
        (void)!write(2, msg, sizeof(msg) - 1);
        if (self == run_owner && channel_fd >= 0 && pthread_mutex_trylock(&channel_lock) == 0) {
                (void)channel_send_end(channel_fd, WIRE_STATUS_MEMORY, 1, 0, false);
                if (session_mode) {
                        sigset_t all;
                        sigfillset(&all);
                        for (;;)
                                sigsuspend(&all);
                }
        }
        /* pid 1 ignores a SIGKILL of its own. */
        if (self != 1)
                syscall(SYS_kill, self, SIGKILL);
        _exit(1);
}

/* Installed once in the template, before any copy is made: every process
 * of a run inherits it (but those that exec another program, where the
 * filter's SIGSYS takes its default action and ends the process). */
static void install_sigsys_handler(void)
{
        struct sigaction sa = {.sa_sigaction = on_sigsys, .sa_flags = SA_SIGINFO};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSYS, &sa, NULL);
}

/* _airlock.exit_by_signal(sig): after the code sent itself sig (SIGKILL),
 * ends the run as that signal would, in pid 1 of a single run; elsewhere
 * returns None. */
static PyObject *py_exit_by_signal(PyObject *self, PyObject *arg)
{
        long sig = PyLong_AsLong(arg);
        if (sig == -1 && PyErr_Occurred())
                return NULL;
        if (sig > 0 && sig < 65 && init_signals_on && syscall(SYS_getpid) == 1) {
                exit_by_signal((int)sig);
        }
        Py_RETURN_NONE;
}

/* _airlock.call(bytes) -> bytes: one request/reply round trip to the host. */
static PyObject *py_call(PyObject *self, PyObject *arg)
{
        Py_buffer buf;
        if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0)
                return NULL;
        if (channel_fd < 0) {
                PyBuffer_Release(&buf);
                PyErr_SetString(PyExc_RuntimeError, "no host channel in this process");
                return NULL;
        }
        char *reply = NULL;
        size_t reply_len = 0;
        int r;
        Py_BEGIN_ALLOW_THREADS;
        pthread_mutex_lock(&channel_lock);
        r = channel_send_raw(channel_fd, buf.buf, (size_t)buf.len);
        if (r >= 0) {
                reply = read_reply(channel_fd, &reply_len);
                if (!reply)
                        r = -EPIPE;
        }
        pthread_mutex_unlock(&channel_lock);
        Py_END_ALLOW_THREADS;
        PyBuffer_Release(&buf);
        if (r == -EMSGSIZE) {
                PyErr_SetString(PyExc_ValueError, "request too large for the host channel");
                return NULL;
        }
        if (r < 0) {
                PyErr_SetString(PyExc_ConnectionError, "the host channel is closed");
                return NULL;
        }
        PyObject *res = PyBytes_FromStringAndSize(reply, (Py_ssize_t)reply_len);
        free(reply);
        return res;
}

static PyMethodDef airlock_methods[] = {
    {"call", py_call, METH_O, "Send one request to the host and return its reply."},
    {"exit_by_signal", py_exit_by_signal, METH_O,
     "End a single run as the signal would (pid 1 ignores the signals it sends itself)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef airlock_module = {
    PyModuleDef_HEAD_INIT,
    "_airlock",
    "The airlock host channel.",
    -1,
    airlock_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

static PyObject *init_airlock_module(void)
{
        return PyModule_Create(&airlock_module);
}

/* Formats the pending Python exception into errbuf. */
static void format_exception(const char *what, char *errbuf, size_t errlen)
{
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        const char *tname = type ? ((PyTypeObject *)type)->tp_name : "error";
        PyObject *s = value ? PyObject_Str(value) : NULL;
        const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
        snprintf(errbuf, errlen, "%s: %s: %s", what, tname, msg ? msg : "");
        Py_XDECREF(s);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        PyErr_Clear();
}

/* Moves every object that exists now out of the collector's reach: a
 * collection in a copy would otherwise touch, and so copy, every page of
 * the template's heap. */
static void freeze_heap(void)
{
        /* After every run of Python code the template makes itself: what a
         * copy's run would free of the template's last run (its import
         * finders, its source, its __main__) is dropped or kept here, so
         * that no copy writes those pages. */
        PyObject *r = runtime_settle ? PyObject_CallNoArgs(runtime_settle) : NULL;
        Py_XDECREF(r);
        PyErr_Clear();
        PyObject *gc = PyImport_ImportModule("gc");
        PyObject *fr = gc ? PyObject_CallMethod(gc, "collect", NULL) : NULL;
        Py_XDECREF(fr);
        fr = gc ? PyObject_CallMethod(gc, "freeze", NULL) : NULL;
        Py_XDECREF(fr);
        Py_XDECREF(gc);
        PyErr_Clear();
}

/* OpenBLAS starts a pool of threads when it is loaded, and a copy made by
 * clone3 has none of them: only the forking thread is copied, and clone3
 * runs no pthread_atfork handlers (where OpenBLAS would stop its pool).
 * A copy that found the pool marked running would hand work to threads
 * that do not exist, and wait for them forever. So the template stops the
 * pool itself before every fork, as OpenBLAS's own fork handler does, and
 * each copy's first parallel product starts a pool of its own. Debian's
 * netlib BLAS has no threads and no such function. */
#define MAX_BLAS_POOLS 4
static void (*blas_shutdown[MAX_BLAS_POOLS])(void);
static size_t n_blas_shutdown;

/* Finds the pool-stopping function of every OpenBLAS the preloads loaded
 * (each of Debian's OpenBLAS variants has its own pool). Libraries loaded
 * later, by a run, are loaded in that run's copy and need nothing. */
static int blas_like(struct dl_phdr_info *info, size_t size, void *found)
{
        (void)size;
        const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
        const char *base = slash ? slash + 1 : info->dlpi_name ? info->dlpi_name : "";
        if (strstr(base, "blas") || strstr(base, "lapack"))
                *(bool *)found = true;
        return 0;
}

static void find_blas_pools(void)
{
        static const char *const libs[] = {"libopenblas.so.0", "libblas.so.3", "liblapack.so.3",
                                           "libopenblasp-r0.3.so"};
        /* dlopen with RTLD_NOLOAD of a name no loaded library answers to
         * still searches the library path for it: some 100 failed system
         * calls in every template without numpy. No library of a BLAS's
         * or LAPACK's file name loaded: none of these is. */
        bool found = false;
        dl_iterate_phdr(blas_like, &found);
        if (!found)
                return;
        for (size_t i = 0; i < ARRAY_SIZE(libs) && n_blas_shutdown < MAX_BLAS_POOLS; i++) {
                void *h = dlopen(libs[i], RTLD_LAZY | RTLD_NOLOAD);
                if (!h)
                        continue;
                void (*fn)(void) = (void (*)(void))dlsym(h, "blas_thread_shutdown_");
                bool known = false;
                for (size_t k = 0; k < n_blas_shutdown; k++)
                        known |= blas_shutdown[k] == fn;
                if (fn && !known)
                        blas_shutdown[n_blas_shutdown++] = fn;
                /* Not unloaded: NOLOAD took a reference of a library that
                 * stays loaded anyway, and the function must stay valid. */
        }
}

/* What one thread of OpenBLAS's pool reserves of the private address space
 * (Debian 12's OpenBLAS 0.3.21): its buffer (BUFFER_SIZE, 128 MiB on
 * x86_64) and its stack (8 MiB), measured as VmData with
 * OPENBLAS_NUM_THREADS=1 and 2 after a product of two 500x500 matrices. */
#define BLAS_THREAD_RESERVE (136ull << 20)

/* The threads a library's pool may use in one run: no more than the CPUs
 * the sandbox may run on, and at most half the run's process limit, so
 * that BLAS alone never uses up the threads the code may start (with
 * --pids 1, BLAS runs on the calling thread only), and without a cgroup at
 * most what half the memory limit reserves. */
static unsigned pool_threads(const template_params *p)
{
        cpu_set_t set;
        unsigned cpus = 1;
        if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
                cpus = (unsigned)CPU_COUNT(&set);
        unsigned n = MAX(1u, MIN(cpus, p->limits.pids / 2));
#if !defined(__SANITIZE_ADDRESS__)
        /* Without a cgroup the memory limit is RLIMIT_DATA (tpl_copy.c),
         * which counts what a process reserves, and each thread of
         * OpenBLAS's pool reserves a buffer of 128 MiB and a stack of
         * 8 MiB, touched or not. Refused one, OpenBLAS cannot go on (the
         * run ends as "memory", on_sigsys), so a --memory 256 run failed
         * its first matrix product with two threads (320 MiB reserved,
         * about 30 MiB used). The pool reserves
         * at most half the limit, so that the other half is the data's,
         * and is one thread (the caller's own, whose buffer is reserved at
         * its first product) when half the limit holds fewer. */
        if (!p->cgroup)
                n = MIN(n, MAX(1u, (unsigned)MIN(UINT_MAX, p->limits.memory_bytes / 2 /
                                                               BLAS_THREAD_RESERVE)));
#endif
        return n;
}

/* The environment the guest's libraries read when they load: pool sizes
 * (OpenBLAS, OpenMP, MKL, numexpr), and matplotlib's default backend. The
 * backend is only named here: matplotlib is imported by the runs that use
 * it, or by a preload. */
static void set_library_environment(const template_params *p)
{
        char n[16];
        snprintf(n, sizeof(n), "%u", pool_threads(p));
        static const char *const pools[] = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                            "MKL_NUM_THREADS", "NUMEXPR_MAX_THREADS"};
        for (size_t i = 0; i < ARRAY_SIZE(pools); i++)
                setenv(pools[i], n, 1);
        /* With figures returned, a backend of airlock's own (Agg, with a
         * show() that returns the figures instead of warning that it
         * cannot show them); else plain Agg. */
        setenv("MPLBACKEND", p->auto_figures ? "module://" GUEST_FIGURES_BACKEND : "Agg", 1);
        /* A preload of matplotlib writes its font list into the template's
         * cache, writable until the template seals it. In a copy,
         * matplotlib's directories are writable ones under HOME instead,
         * the font list copied in from the cache (runtime.py). */
        setenv("MPLCONFIGDIR", GUEST_CACHE_DIR "/matplotlib", 1);
}

/* Contract: glibc caches each thread's kernel id in its thread descriptor
 * and reads it there for pthread_kill, pthread_getcpuclockid,
 * pthread_sigqueue and the like. fork() refreshes it in the child; a copy
 * made by a raw clone3 (spawn_copy) or clone (a session's base_hop) keeps
 * the template's, so that signal.pthread_kill() on the main thread would
 * signal a thread id of the template's namespace (ESRCH) and
 * time.pthread_getcpuclockid() would name a clock that does not exist
 * (EINVAL). The descriptor's layout is glibc's own, so its address is not
 * computed from an offset: glibc registers that very field with the kernel
 * as the thread's clear_child_tid at start (set_tid_address), and
 * PR_GET_TID_ADDRESS reads the registration back. It is taken once, here,
 * in the template's main thread, the thread every copy is cloned from, and
 * used only when it holds that thread's id (so it is the field); copies
 * share the template's layout, so the address holds in each
 * (guest_refresh_tid). Without it (a kernel built without
 * CONFIG_CHECKPOINT_RESTORE) the ids stay stale, as before. */
static void find_tid_slot(void)
{
        pid_t *addr = NULL;
        if (prctl(PR_GET_TID_ADDRESS, &addr, 0, 0, 0) == 0 && addr &&
            *addr == (pid_t)syscall(SYS_gettid))
                tid_slot = addr;
}

/* In a process cloned from the template's main thread: writes its own id
 * where glibc reads it, and registers the field again as the thread's
 * clear_child_tid, as glibc's fork() does in its child (the clone started
 * without one). set_tid_address returns the caller's id. */
static void guest_refresh_tid(void)
{
        if (tid_slot)
                *tid_slot = (pid_t)syscall(SYS_set_tid_address, tid_slot);
}

/* Python's "open" audit event, raised by open() and os.open() before the
 * file is opened: a file of /proc that the copy writes is written again
 * first (tpl_proc_opened). Never fails the open. */
static int proc_open_hook(const char *event, PyObject *args, void *data)
{
        (void)data;
        if (event[0] != 'o' || strcmp(event, "open") != 0 || !PyTuple_Check(args) ||
            PyTuple_GET_SIZE(args) < 1)
                return 0;
        PyObject *file = PyTuple_GET_ITEM(args, 0);
        if (PyLong_Check(file) || file == Py_None)
                return 0;
        PyObject *path = PyOS_FSPath(file);
        const char *s = NULL;
        if (path && PyUnicode_Check(path))
                s = PyUnicode_AsUTF8(path);
        else if (path && PyBytes_Check(path))
                s = PyBytes_AS_STRING(path);
        if (s)
                tpl_proc_opened(s);
        Py_XDECREF(path);
        PyErr_Clear();
        return 0;
}

/* The guest runtime's code object. The bytecode compiled at build time
 * when its magic number is this libpython's (the interpreter then reads
 * it as its own), which spares every template the compilation of the
 * source: 13 ms of a cold start on the 2-core test machine, where loading
 * the bytecode takes under 1 ms. Otherwise, or if it cannot be read, the
 * source is compiled, with the same name and flags the build used. The
 * bytecode is part of this program, as the source is: both come from the
 * sealed memfd copy the template runs. */
static PyObject *runtime_code(void)
{
        if (guest_runtime_pyc_len > 4) {
                const unsigned char *m = guest_runtime_pyc;
                long magic = (long)((unsigned long)m[0] | (unsigned long)m[1] << 8 |
                                    (unsigned long)m[2] << 16 | (unsigned long)m[3] << 24);
                if (magic == PyImport_GetMagicNumber()) {
                        PyObject *code = PyMarshal_ReadObjectFromString(
                            (const char *)m + 4, (Py_ssize_t)(guest_runtime_pyc_len - 4));
                        if (code && PyCode_Check(code))
                                return code;
                        Py_XDECREF(code);
                        PyErr_Clear();
                }
        }
        return Py_CompileString((const char *)guest_runtime_py, "<airlock-runtime>", Py_file_input);
}

int guest_init(const template_params *p, char *errbuf, size_t errlen)
{
        find_tid_slot();
        set_library_environment(p);
        if (PyImport_AppendInittab("_airlock", init_airlock_module) < 0) {
                snprintf(errbuf, errlen, "python: cannot register the _airlock module");
                return -EIO;
        }
        /* UTF-8 mode: the guest's text, file names and output are UTF-8,
         * whatever a library sets its locale to. And LC_CTYPE is set from
         * the environment (LANG=C.UTF-8, sandbox.c), as the python3
         * program does, here in the template, before anything reads it:
         * an isolated configuration leaves it at "C", where
         * locale.getencoding() says ASCII and C libraries (readline,
         * curses, mbstowcs) refuse every byte above 127. glibc's C.UTF-8
         * is built in: no locale file needs to be in the guest's root. */
        PyPreConfig pre;
        PyPreConfig_InitIsolatedConfig(&pre);
        pre.utf8_mode = 1;
        pre.configure_locale = 1;
        PyStatus pst = Py_PreInitialize(&pre);
        if (PyStatus_Exception(pst)) {
                snprintf(errbuf, errlen, "python: pre-initialisation failed: %s",
                         pst.err_msg ? pst.err_msg : "unknown error");
                return -EIO;
        }
        PyConfig config;
        /* Isolated: no environment variables, no user site, no current
         * directory on sys.path. Site stays on so Debian's dist-packages
         * (numpy and friends, for --preload) are importable. */
        PyConfig_InitIsolatedConfig(&config);
        config.install_signal_handlers = 1;
        config.write_bytecode = 0;
        config.site_import = 1;
        config.parse_argv = 0;
        config.buffered_stdio = 1;
        PyStatus st = PyConfig_SetString(&config, &config.program_name, L"/usr/bin/python3");
        if (!PyStatus_Exception(st)) {
                wchar_t *argv[] = {L"", NULL};
                st = PyConfig_SetArgv(&config, 1, argv);
        }
        if (!PyStatus_Exception(st))
                st = Py_InitializeFromConfig(&config);
        PyConfig_Clear(&config);
        if (PyStatus_Exception(st)) {
                snprintf(errbuf, errlen, "python: initialisation failed: %s",
                         st.err_msg ? st.err_msg : "unknown error");
                return -EIO;
        }
        /* After Python's own handlers, none of which is SIGSYS's. */
        install_sigsys_handler();
        if (PySys_AddAuditHook(proc_open_hook, NULL) < 0) {
                snprintf(errbuf, errlen, "python: cannot add the /proc audit hook");
                return -EIO;
        }

        PyObject *code = runtime_code();
        PyObject *mod = code ? PyImport_ExecCodeModule("_airlock_runtime", code) : NULL;
        Py_XDECREF(code);
        if (!mod) {
                format_exception("python: the guest runtime failed to load", errbuf, errlen);
                return -EIO;
        }
        /* The --python-path folders go on sys.path before any preload,
         * which may come from one of them. */
        PyObject *paths = PyList_New(0);
        for (size_t i = 0; paths && i < p->n_sys_path; i++) {
                PyObject *s = PyUnicode_DecodeFSDefault(p->sys_path[i]);
                if (!s || PyList_Append(paths, s) < 0)
                        Py_CLEAR(paths);
                Py_XDECREF(s);
        }
        PyObject *r = paths ? PyObject_CallMethod(mod, "_install", "OOO",
                                                  p->auto_figures ? Py_True : Py_False, paths,
                                                  p->single_run ? Py_True : Py_False)
                            : NULL;
        Py_XDECREF(paths);
        if (!r) {
                format_exception("python: the guest runtime failed to install", errbuf, errlen);
                Py_DECREF(mod);
                return -EIO;
        }
        Py_DECREF(r);
        runtime_run = PyObject_GetAttrString(mod, "_run");
        runtime_after_fork = PyObject_GetAttrString(mod, "_after_fork");
        runtime_build = PyObject_GetAttrString(mod, "_build_caches");
        runtime_after_preloads = PyObject_GetAttrString(mod, "_after_preloads");
        runtime_set_stdin = PyObject_GetAttrString(mod, "_set_stdin");
        runtime_settle = PyObject_GetAttrString(mod, "_settle_template");
        Py_DECREF(mod);
        if (!runtime_run || !runtime_after_fork || !runtime_build || !runtime_after_preloads ||
            !runtime_set_stdin || !runtime_settle) {
                format_exception("python: the guest runtime is incomplete", errbuf, errlen);
                return -EIO;
        }

        for (size_t i = 0; i < p->n_preloads; i++) {
                PyObject *m = PyImport_ImportModule(p->preloads[i]);
                if (!m) {
                        char what[256];
                        snprintf(what, sizeof(what), "preload '%s' failed", p->preloads[i]);
                        format_exception(what, errbuf, errlen);
                        return -ENOENT;
                }
                Py_DECREF(m);
        }
        /* MPLCONFIGDIR was for the preloads only (set_library_environment). */
        r = PyObject_CallNoArgs(runtime_after_preloads);
        if (!r) {
                format_exception("python: the guest runtime failed after the preloads", errbuf,
                                 errlen);
                return -EIO;
        }
        Py_DECREF(r);
        find_blas_pools();

        freeze_heap();
        guest_heap_reserve();
        return 0;
}

/* The runs of a warming pass the template makes after its warm-up: a few
 * more than the 8 calls CPython 3.11 counts before it quickens a function
 * (QUICKENING_WARMUP_DELAY). A function the template called fewer times
 * counts each call in its code object, and is rewritten whole once
 * quickened, in every copy: each a page copied on write. Run here, the
 * passes' code (the run's path, and the preloaded numpy and pandas paths
 * of runtime._prewarm) is quickened once for all copies. A ready copy
 * wrote 237 to 242 pages without preloads and 936 to 957 with numpy and
 * pandas, against 259 and 1,127 with the copy's own heap alone
 * (guest_heap.c) and 284 to 292 and 1,195 to 1,207 before either
 * (bench_runcost.py BUILD --written); the template holds about 1 MiB more
 * with numpy and pandas (pandas' caches, shared by its copies), and
 * nothing more without. */
#define GUEST_WARM_RUNS 10

int guest_warm_up(char *errbuf, size_t errlen)
{
        /* Import what the runner and typical snippets need and run a
         * snippet once, so a copy does none of this work. */
        static const char warmup[] =
            "import traceback, random, json, base64, tempfile, os, io, re, math, csv\n"
            "import collections, itertools, functools, datetime, pathlib, string\n"
            "print('', end='')\n";
        /* The probe's code (tpl_run.c, probe_frames). */
        static const char pass[] =
            "print('', end='')\nimport sys\nsys.modules['_airlock_runtime']._prewarm()\n";
        const char *status = NULL;
        (void)guest_run(warmup, sizeof(warmup) - 1, false, &status);
        if (!status || strcmp(status, WIRE_STATUS_OK) != 0) {
                snprintf(errbuf, errlen, "python: the warm-up run failed");
                return -EIO;
        }
        /* A pass that fails (a preloaded pandas that does not take the
         * pass's DataFrame) only ends the passes: the copies then quicken
         * what is left themselves, as before. */
        for (int i = 0; i < GUEST_WARM_RUNS && strcmp(status, WIRE_STATUS_OK) == 0; i++)
                (void)guest_run(pass, sizeof(pass) - 1, false, &status);
        freeze_heap();
        return 0;
}

void guest_set_session(void)
{
        session_mode = true;
}

/* Contract: in a session, the main thread holds channel_lock whenever no
 * cell runs (from tpl_serve_host: taken when the session opens and after
 * each cell, given back only while a cell's code runs). Between cells the
 * channel carries the host's session control (snapshots, forks, restores),
 * read by the main thread: a request of a guest thread sent then would be
 * read by the host as the answer to its control frame, and the thread's
 * wait for its reply would take the host's next frame. A thread that calls
 * the host between cells (a heartbeat) waits here instead, without the
 * GIL, until the next cell runs; one whose request is under way when the
 * cell's code returns is answered before the cell ends, since the host
 * serves requests until the "end" frame, which is sent only once the main
 * thread holds the lock. Every process made from this one (a snapshot, a
 * cell base, a fork, a rollback's interpreter) is forked by the main thread
 * while it holds the lock, and so starts with it held by its only thread. */
void guest_channel_hold(bool hold)
{
        if (hold)
                pthread_mutex_lock(&channel_lock);
        else
                pthread_mutex_unlock(&channel_lock);
}

void guest_before_fork(void)
{
        for (size_t i = 0; i < n_blas_shutdown; i++)
                blas_shutdown[i]();
        PyOS_BeforeFork();
}

pid_t guest_start_cache_builder(void)
{
        guest_before_fork();
        pid_t pid = fork();
        if (pid == 0) {
                PyOS_AfterFork_Child();
                /* It holds nothing of the template's but memory: not the
                 * control socket, whose closing tells the host that the
                 * template is gone, nor any copy's fd. It dies with the
                 * template. */
                prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                syscall(SYS_close_range, 3, ~0u, 0);
                PyObject *r = PyObject_CallNoArgs(runtime_build);
                Py_XDECREF(r);
                _exit(r ? 0 : 1);
        }
        int saved = errno;
        guest_after_fork_parent();
        return pid < 0 ? -saved : pid;
}

void guest_after_fork_parent(void)
{
        PyOS_AfterFork_Parent();
}

void guest_after_fork_child(int fd)
{
        /* Before any Python runs here: the copy's new objects go to pages
         * the template never wrote (guest_heap.c). */
        guest_heap_install();
        guest_refresh_tid();
        PyOS_AfterFork_Child();
        channel_fd = fd;
        /* Whether this copy is pid 1 of its PID namespace, told rather
         * than asked: runtime._after_fork touches as few objects as it can
         * (each a page copied). */
        PyObject *r =
            PyObject_CallOneArg(runtime_after_fork, syscall(SYS_getpid) == 1 ? Py_True : Py_False);
        Py_XDECREF(r);
        PyErr_Clear();
}

void guest_after_fork_snapshot(int fd)
{
        /* Only the locks PyOS_BeforeFork took are released, as in the
         * parent: a snapshot runs no Python itself, and each process made
         * from it takes them again (guest_before_fork) and reinitialises
         * the whole interpreter in the child (guest_after_fork_child). The
         * full reinitialisation here would write some 200 pages, each a
         * private copy, in every snapshot and cell base. */
        PyOS_AfterFork_Parent();
        channel_fd = fd;
}

void guest_set_argv(const char *const *argv, size_t n)
{
        PyObject *list = PyList_New(0);
        for (size_t i = 0; list && i < n; i++) {
                PyObject *s = PyUnicode_DecodeFSDefault(argv[i]);
                if (s)
                        (void)PyList_Append(list, s);
                Py_XDECREF(s);
        }
        if (list)
                (void)PySys_SetObject("argv", list);
        Py_XDECREF(list);
        PyErr_Clear();
}

/* Whether runtime._set_stdin may hold a mode other than the default: a
 * run with the default after runs with the default calls no Python. */
static bool stdin_mode_set;

void guest_set_stdin(const char *mode)
{
        if (!*mode && !stdin_mode_set)
                return;
        PyObject *r = PyObject_CallFunction(runtime_set_stdin, "s", mode);
        /* A failed call may have left the last mode in place. */
        stdin_mode_set = *mode || !r;
        Py_XDECREF(r);
        PyErr_Clear();
}

int guest_run(const char *code, size_t len, bool last, const char **ret_status)
{
        PyObject *src = PyUnicode_DecodeUTF8(code, (Py_ssize_t)len, "strict");
        if (!src) {
                PyErr_Clear();
                *ret_status = WIRE_STATUS_ERROR;
                fputs("SyntaxError: the code is not valid UTF-8\n", stderr);
                return 1;
        }
        run_owner = (pid_t)syscall(SYS_getpid);
        PyObject *res =
            PyObject_CallFunction(runtime_run, "OOO", src, session_mode ? Py_True : Py_False,
                                  last && !session_mode ? Py_True : Py_False);
        Py_DECREF(src);
        run_owner = 0;
        int exit_code = 1;
        *ret_status = WIRE_STATUS_ERROR;
        if (res && PyTuple_Check(res) && PyTuple_GET_SIZE(res) == 2) {
                const char *s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(res, 0));
                long c = PyLong_AsLong(PyTuple_GET_ITEM(res, 1));
                if (s && strcmp(s, WIRE_STATUS_OK) == 0)
                        *ret_status = WIRE_STATUS_OK;
                else if (s && strcmp(s, WIRE_STATUS_MEMORY) == 0)
                        *ret_status = WIRE_STATUS_MEMORY;
                exit_code = (int)c;
        } else if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_MemoryError)) {
                *ret_status = WIRE_STATUS_MEMORY;
        }
        Py_XDECREF(res);
        PyErr_Clear();
        return exit_code;
}
