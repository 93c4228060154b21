/* libmicrohttpd, opened when `airlock serve` first uses it rather than
 * linked into the program.
 *
 * Only `airlock serve` speaks HTTP, but a library the program is linked
 * with is loaded, and relocated, by every process that runs the program:
 * each `airlock run`, and each sandbox's template, which is this program
 * executed again (src/lib/template/template.c). libmicrohttpd brings
 * GnuTLS, p11-kit, nettle, gmp and others with it, some 180 page faults
 * and 6 ms of CPU per process on the 2-core test machine, twice on the
 * path of every cold start (the command, then its template). So the
 * functions serve*.c call are defined here, with libmicrohttpd's own
 * names and signatures, and forward to the library opened on first use
 * (as src/common/curl_dl.c does with libcurl); serve*.c are unchanged.
 *
 * When the library cannot be opened, MHD_start_daemon returns NULL with
 * errno ELIBACC, which serve reports as the reason it cannot listen; no
 * other function is reached without a daemon. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <microhttpd.h>

/* The SONAME of libmicrohttpd 0.9.x (Debian's libmicrohttpd12). */
#define MHD_SONAME "libmicrohttpd.so.12"

static struct {
        struct MHD_Daemon *(*start_daemon_va)(unsigned int, uint16_t, MHD_AcceptPolicyCallback,
                                              void *, MHD_AccessHandlerCallback, void *, va_list);
        void (*stop_daemon)(struct MHD_Daemon *);
        MHD_socket (*quiesce_daemon)(struct MHD_Daemon *);
        const union MHD_DaemonInfo *(*get_daemon_info)(struct MHD_Daemon *, enum MHD_DaemonInfoType,
                                                       ...);
        const union MHD_ConnectionInfo *(*get_connection_info)(struct MHD_Connection *,
                                                               enum MHD_ConnectionInfoType, ...);
        const char *(*lookup_connection_value)(struct MHD_Connection *, enum MHD_ValueKind,
                                               const char *);
        int (*get_connection_values)(struct MHD_Connection *, enum MHD_ValueKind,
                                     MHD_KeyValueIterator, void *);
        struct MHD_Response *(*create_response_from_buffer)(size_t, void *,
                                                            enum MHD_ResponseMemoryMode);
        struct MHD_Response *(*create_response_from_callback)(uint64_t, size_t,
                                                              MHD_ContentReaderCallback, void *,
                                                              MHD_ContentReaderFreeCallback);
        enum MHD_Result (*add_response_header)(struct MHD_Response *, const char *, const char *);
        enum MHD_Result (*queue_response)(struct MHD_Connection *, unsigned int,
                                          struct MHD_Response *);
        void (*destroy_response)(struct MHD_Response *);
} mhd;

static pthread_once_t mhd_once = PTHREAD_ONCE_INIT;
static int mhd_ready; /* 1 when every function was found */

static void mhd_open(void)
{
        struct {
                const char *name;
                void **slot;
        } syms[] = {
            {"MHD_start_daemon_va", (void **)&mhd.start_daemon_va},
            {"MHD_stop_daemon", (void **)&mhd.stop_daemon},
            {"MHD_quiesce_daemon", (void **)&mhd.quiesce_daemon},
            {"MHD_get_daemon_info", (void **)&mhd.get_daemon_info},
            {"MHD_get_connection_info", (void **)&mhd.get_connection_info},
            {"MHD_lookup_connection_value", (void **)&mhd.lookup_connection_value},
            {"MHD_get_connection_values", (void **)&mhd.get_connection_values},
            {"MHD_create_response_from_buffer", (void **)&mhd.create_response_from_buffer},
            {"MHD_create_response_from_callback", (void **)&mhd.create_response_from_callback},
            {"MHD_add_response_header", (void **)&mhd.add_response_header},
            {"MHD_queue_response", (void **)&mhd.queue_response},
            {"MHD_destroy_response", (void **)&mhd.destroy_response},
        };
        void *so = dlopen(MHD_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (!so)
                return;
        for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
                if (!(*syms[i].slot = dlsym(so, syms[i].name)))
                        return;
        mhd_ready = 1;
}

struct MHD_Daemon *MHD_start_daemon(unsigned int flags, uint16_t port, MHD_AcceptPolicyCallback apc,
                                    void *apc_cls, MHD_AccessHandlerCallback dh, void *dh_cls, ...)
{
        pthread_once(&mhd_once, mhd_open);
        if (!mhd_ready) {
                errno = ELIBACC;
                return NULL;
        }
        va_list ap;
        va_start(ap, dh_cls);
        struct MHD_Daemon *d = mhd.start_daemon_va(flags, port, apc, apc_cls, dh, dh_cls, ap);
        va_end(ap);
        return d;
}

/* The functions below are reached only through a daemon that
 * MHD_start_daemon started, so the library is open. */

void MHD_stop_daemon(struct MHD_Daemon *daemon)
{
        mhd.stop_daemon(daemon);
}

MHD_socket MHD_quiesce_daemon(struct MHD_Daemon *daemon)
{
        return mhd.quiesce_daemon(daemon);
}

/* serve*.c ask only for kinds of information that take no further
 * argument (the bound port; a connection's fd and client address). */
const union MHD_DaemonInfo *MHD_get_daemon_info(struct MHD_Daemon *daemon,
                                                enum MHD_DaemonInfoType info_type, ...)
{
        return mhd.get_daemon_info(daemon, info_type);
}

const union MHD_ConnectionInfo *MHD_get_connection_info(struct MHD_Connection *connection,
                                                        enum MHD_ConnectionInfoType info_type, ...)
{
        return mhd.get_connection_info(connection, info_type);
}

const char *MHD_lookup_connection_value(struct MHD_Connection *connection, enum MHD_ValueKind kind,
                                        const char *key)
{
        return mhd.lookup_connection_value(connection, kind, key);
}

int MHD_get_connection_values(struct MHD_Connection *connection, enum MHD_ValueKind kind,
                              MHD_KeyValueIterator iterator, void *iterator_cls)
{
        return mhd.get_connection_values(connection, kind, iterator, iterator_cls);
}

struct MHD_Response *MHD_create_response_from_buffer(size_t size, void *buffer,
                                                     enum MHD_ResponseMemoryMode mode)
{
        return mhd.create_response_from_buffer(size, buffer, mode);
}

struct MHD_Response *MHD_create_response_from_callback(uint64_t size, size_t block_size,
                                                       MHD_ContentReaderCallback crc, void *crc_cls,
                                                       MHD_ContentReaderFreeCallback crfc)
{
        return mhd.create_response_from_callback(size, block_size, crc, crc_cls, crfc);
}

enum MHD_Result MHD_add_response_header(struct MHD_Response *response, const char *header,
                                        const char *content)
{
        return mhd.add_response_header(response, header, content);
}

enum MHD_Result MHD_queue_response(struct MHD_Connection *connection, unsigned int status_code,
                                   struct MHD_Response *response)
{
        return mhd.queue_response(connection, status_code, response);
}

void MHD_destroy_response(struct MHD_Response *response)
{
        mhd.destroy_response(response);
}
