/* The trace core (src/common/trace.c) without a collector: W3C traceparent
 * parsing (a malformed one is refused, so that the span under it starts a
 * new trace), its formatting, and that tracing is off and free without an
 * endpoint. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

#define TP "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

static void test_a_valid_traceparent_round_trips(void **state)
{
        al_trace_ctx c;
        assert_int_equal(al_trace_parse(TP, "a=1", "k=v", &c), 0);
        assert_true(c.valid);
        assert_int_equal(c.flags, 1);
        assert_string_equal(c.tracestate, "a=1");
        assert_string_equal(c.baggage, "k=v");
        char buf[AL_TRACEPARENT_LEN + 1];
        al_trace_format(&c, buf);
        assert_string_equal(buf, TP);
        /* A later version may add fields after a '-'. */
        assert_int_equal(al_trace_parse("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00-x",
                                        NULL, NULL, &c),
                         0);
        assert_int_equal(c.flags, 0);
}

static void test_malformed_traceparents_are_refused(void **state)
{
        const char *bad[] = {
            NULL,
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",    /* short */
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x", /* 00 has no more */
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",   /* version ff */
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",   /* zero trace id */
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",   /* zero span id */
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",   /* upper case */
            "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",   /* separator */
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",   /* flags */
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                al_trace_ctx c;
                assert_int_equal(al_trace_parse(bad[i], NULL, NULL, &c), -EINVAL);
                assert_false(c.valid);
        }
}

static void test_tracestate_with_a_line_break_or_too_long_is_dropped(void **state)
{
        al_trace_ctx c;
        assert_int_equal(al_trace_parse(TP, "a=1\r\nX-Evil: 1", NULL, &c), 0);
        assert_string_equal(c.tracestate, "");
        char *longer = malloc(AL_BAGGAGE_MAX + 2);
        memset(longer, 'b', AL_BAGGAGE_MAX + 1);
        longer[AL_BAGGAGE_MAX + 1] = '\0';
        assert_int_equal(al_trace_parse(TP, NULL, longer, &c), 0);
        assert_string_equal(c.baggage, "");
        free(longer);
}

static void test_off_without_an_endpoint(void **state)
{
        unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
        unsetenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        assert_false(al_trace_on());
        assert_null(al_span_start("x", AL_SPAN_INTERNAL, NULL));
        /* Every call takes the NULL span. */
        al_span_set_str(NULL, "k", "v");
        al_span_error(NULL, "e");
        al_span_end(NULL);
        al_trace_shutdown(10);
        assert_int_equal(al_trace_dropped(), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_a_valid_traceparent_round_trips),
            cmocka_unit_test(test_malformed_traceparents_are_refused),
            cmocka_unit_test(test_tracestate_with_a_line_break_or_too_long_is_dropped),
            cmocka_unit_test(test_off_without_an_endpoint),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
