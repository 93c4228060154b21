/* The spans of a run (run_trace.c, docs/tracing.md). */
#ifndef AIRLOCK_RUN_TRACE_H
#define AIRLOCK_RUN_TRACE_H

#include <jansson.h>

#include "airlock.h"
#include "trace.h"
#include "host/gateway.h"
#include "host/secrets.h"

al_span *sbx_trace_run_begin(const char *name, const airlock_run_options *o, const char *code,
                             size_t len, const secret_store *ss);
/* Ends the run's span with the limits, the status and what the run used. */
void sbx_trace_run_end(al_span *s, const airlock_limits *lim, int r, const airlock_result *res,
                       const char *error);
/* A child of the thread's current span (the copy's wait, a session's
 * fork or close), or NULL without one. */
al_span *sbx_trace_child(const char *name);
al_span *sbx_trace_tool_begin(const char *name, bool upstream, const json_t *args,
                              const secret_store *ss, al_span **ret_outer);
void sbx_trace_tool_end(al_span *s, al_span *outer, bool ok, const char *kind);
al_span *sbx_trace_http_begin(void);
void sbx_trace_http_end(al_span *s, const gateway_record *rec, int r);
/* Puts the airlock secrets that OTEL_EXPORTER_OTLP_HEADERS names into the
 * exporter's headers (trace.h), from a new sandbox's configuration. */
void sbx_trace_secrets(const secret_store *ss);

#endif
