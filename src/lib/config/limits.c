/* Everything generated from the limits table (limits.h): defaults, range
 * checks, the fingerprint text, the template's parameters, the command
 * line's options and the description's sentence. */
#include "config/limits.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define LIMIT_CTYPE_D   double
#define LIMIT_CTYPE_U32 uint32_t
#define LIMIT_CTYPE_U64 uint64_t

/* ---- the table and the struct agree ------------------------------------ */

/* The table in the struct's order, as a struct of its own: every field at
 * the same offset, with the same type, and the same size in all. That
 * catches a row in another order or of another type, and a field of the
 * struct that the table lacks unless it hides in padding. */
#define LIMIT_MIRROR(name, type, ...) LIMIT_CTYPE_##type name;
struct limits_mirror {
        size_t size;
        AIRLOCK_LIMITS(LIMIT_MIRROR)
};
_Static_assert(sizeof(struct limits_mirror) == sizeof(airlock_limits),
               "airlock_limits (airlock.h) and the limits table (config/limits.h) disagree");
#define LIMIT_ASSERT(name, type, ...)                                                              \
        _Static_assert(                                                                            \
            offsetof(struct limits_mirror, name) == offsetof(airlock_limits, name) &&              \
                _Generic(((airlock_limits *)0)->name, LIMIT_CTYPE_##type : 1, default : 0),        \
            "airlock_limits." #name ": another place or type in the limits table");
AIRLOCK_LIMITS(LIMIT_ASSERT)

/* The defaults, one per row in order, with no member names: a field that
 * the struct has and the table does not, even one in padding, is then a
 * missing initializer, and a row too many an excess element. Both are
 * errors here. */
#define LIMIT_DEFAULT(name, type, dflt, ...) dflt,
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wmissing-field-initializers"
static const airlock_limits limit_defaults = {sizeof(airlock_limits),
                                              AIRLOCK_LIMITS(LIMIT_DEFAULT)};
#pragma GCC diagnostic pop

/* ---- rows -------------------------------------------------------------- */

typedef enum limit_type {
        LIMIT_D,
        LIMIT_U32,
        LIMIT_U64,
} limit_type;

typedef enum limit_unit {
        LIMIT_UNIT_SEC,
        LIMIT_UNIT_MIB,
        LIMIT_UNIT_KIB,
        LIMIT_UNIT_N,
        LIMIT_UNIT_B,
} limit_unit;

/* What one of the unit is, in the field's own unit (bytes, seconds, ...). */
static const uint64_t unit_scale[] = {
    [LIMIT_UNIT_SEC] = 1, [LIMIT_UNIT_MIB] = LIMIT_MIB, [LIMIT_UNIT_KIB] = LIMIT_KIB,
    [LIMIT_UNIT_N] = 1,   [LIMIT_UNIT_B] = 1,
};

typedef struct limit_row {
        const char *name;
        limit_type type;
        size_t offset;
        double dmin, dmax;   /* LIMIT_D */
        uint64_t umin, umax; /* LIMIT_U32, LIMIT_U64 */
        bool tpl;
        limit_unit unit;
        airlock_limit_option option; /* option.name NULL: no option */
        unsigned rank;
        const char *before, *after;
} limit_row;

#define LIMIT_BOUNDS_D(lo, hi)   .dmin = (lo), .dmax = (hi)
#define LIMIT_BOUNDS_U32(lo, hi) .umin = (lo), .umax = (hi)
#define LIMIT_BOUNDS_U64(lo, hi) .umin = (lo), .umax = (hi)
#define LIMIT_ROW(name_, type_, dflt, lo, hi, tpl_, opt, unit_, help, rank_, before_, after_)      \
        {.name = #name_,                                                                           \
         .type = LIMIT_##type_,                                                                    \
         .offset = offsetof(airlock_limits, name_),                                                \
         LIMIT_BOUNDS_##type_(lo, hi),                                                             \
         .tpl = (tpl_),                                                                            \
         .unit = LIMIT_UNIT_##unit_,                                                               \
         .option = {opt, #unit_, help},                                                            \
         .rank = (rank_),                                                                          \
         .before = (before_),                                                                      \
         .after = (after_)},
static const limit_row limit_rows[] = {AIRLOCK_LIMITS(LIMIT_ROW)};

static double get_d(const airlock_limits *l, const limit_row *r)
{
        double v;
        memcpy(&v, (const char *)l + r->offset, sizeof(v));
        return v;
}

static uint64_t get_u(const airlock_limits *l, const limit_row *r)
{
        if (r->type == LIMIT_U32) {
                uint32_t v;
                memcpy(&v, (const char *)l + r->offset, sizeof(v));
                return v;
        }
        uint64_t v;
        memcpy(&v, (const char *)l + r->offset, sizeof(v));
        return v;
}

static void set_d(airlock_limits *l, const limit_row *r, double v)
{
        memcpy((char *)l + r->offset, &v, sizeof(v));
}

/* v must fit the field: the callers check it against the row's range. */
static void set_u(airlock_limits *l, const limit_row *r, uint64_t v)
{
        if (r->type == LIMIT_U32) {
                uint32_t v32 = (uint32_t)v;
                memcpy((char *)l + r->offset, &v32, sizeof(v32));
        } else {
                memcpy((char *)l + r->offset, &v, sizeof(v));
        }
}

/* Whether the caller's struct (of l->size bytes) has row r's field: a
 * caller built with an older airlock.h lacks the newer ones. */
static bool row_fits(const airlock_limits *l, const limit_row *r)
{
        size_t width = r->type == LIMIT_U32 ? sizeof(uint32_t) : sizeof(uint64_t);
        return l->size <= sizeof(airlock_limits) * 64 && r->offset + width <= l->size;
}

static bool unit_is_bytes(limit_unit u)
{
        return u == LIMIT_UNIT_MIB || u == LIMIT_UNIT_KIB || u == LIMIT_UNIT_B;
}

void limits_size_text(uint64_t bytes, char *buf, size_t size)
{
        if (bytes >= LIMIT_GIB && bytes % LIMIT_GIB == 0)
                snprintf(buf, size, "%llu GiB", (unsigned long long)(bytes / LIMIT_GIB));
        else if (bytes >= LIMIT_MIB && bytes % LIMIT_MIB == 0)
                snprintf(buf, size, "%llu MiB", (unsigned long long)(bytes / LIMIT_MIB));
        else if (bytes >= LIMIT_KIB && bytes % LIMIT_KIB == 0)
                snprintf(buf, size, "%llu KiB", (unsigned long long)(bytes / LIMIT_KIB));
        else
                snprintf(buf, size, "%llu bytes", (unsigned long long)bytes);
}

/* A value of row r for people: "7.5 s", "256 MiB", "12". */
static void value_text(const limit_row *r, double d, uint64_t u, char *buf, size_t size)
{
        if (r->type == LIMIT_D)
                snprintf(buf, size, "%g s", d);
        else if (unit_is_bytes(r->unit))
                limits_size_text(u, buf, size);
        else
                snprintf(buf, size, "%llu", (unsigned long long)u);
}

/* ---- defaults and checks ----------------------------------------------- */

void limits_resolve_sizes(airlock_limits *l)
{
        if (!l->output_fs_bytes)
                l->output_fs_bytes = l->max_output_total + LIMIT_MIB;
        if (!l->tmp_bytes)
                l->tmp_bytes = l->memory_bytes;
        if (!l->max_file_bytes)
                l->max_file_bytes = MAX(l->tmp_bytes, l->output_fs_bytes);
}

void airlock_limits_init(airlock_limits *l, size_t size)
{
        /* A caller built with an older airlock.h has fewer fields: fill
         * those it has. A size too small for even the first version's
         * fields is a caller's bug, and nothing is written. */
        if (size < AIRLOCK_LIMITS_SIZE_V1)
                return;
        memcpy(l, &limit_defaults, size < sizeof(limit_defaults) ? size : sizeof(limit_defaults));
        if (size > sizeof(limit_defaults))
                memset((char *)l + sizeof(limit_defaults), 0, size - sizeof(limit_defaults));
        l->size = size;
}

int limits_from_caller(const airlock_limits *in, airlock_limits *out, airlock_error *err)
{
        *out = limit_defaults;
        return al_struct_in(out, sizeof(*out), in, AIRLOCK_LIMITS_SIZE_V1, "airlock_limits",
                            "airlock_limits_default", err);
}

int limits_check(const airlock_limits *l, airlock_error *err)
{
        for (size_t i = 0; i < ARRAY_SIZE(limit_rows); i++) {
                const limit_row *r = &limit_rows[i];
                char v[32], lo[32], hi[32];
                if (r->type == LIMIT_D) {
                        double d = get_d(l, r);
                        /* Written so that NaN is out of every range. */
                        if (d >= r->dmin && d <= r->dmax)
                                continue;
                        value_text(r, d, 0, v, sizeof(v));
                        value_text(r, r->dmin, 0, lo, sizeof(lo));
                        value_text(r, r->dmax, 0, hi, sizeof(hi));
                } else {
                        uint64_t u = get_u(l, r);
                        if (u >= r->umin && u <= r->umax)
                                continue;
                        value_text(r, 0, u, v, sizeof(v));
                        value_text(r, 0, r->umin, lo, sizeof(lo));
                        value_text(r, 0, r->umax, hi, sizeof(hi));
                }
                return al_error(err, -EINVAL, NULL, "limit %s = %s is out of range [%s, %s]",
                                r->name, v, lo, hi);
        }
        return 0;
}

/* ---- the template's parameters ----------------------------------------- */

int limits_to_json(const airlock_limits *l, json_t *obj)
{
        for (size_t i = 0; i < ARRAY_SIZE(limit_rows); i++) {
                const limit_row *r = &limit_rows[i];
                if (!r->tpl)
                        continue;
                /* A uint64_t above INT64_MAX goes as the negative json_int_t
                 * of the same bits, and comes back as itself. */
                json_t *v = r->type == LIMIT_D ? json_real(get_d(l, r))
                                               : json_integer((json_int_t)get_u(l, r));
                if (json_object_set_new(obj, r->name, v) < 0)
                        return -ENOMEM;
        }
        return 0;
}

void limits_from_json(airlock_limits *l, const json_t *obj)
{
        for (size_t i = 0; i < ARRAY_SIZE(limit_rows); i++) {
                const limit_row *r = &limit_rows[i];
                const json_t *v = r->tpl ? json_object_get(obj, r->name) : NULL;
                if (!v)
                        continue;
                if (r->type == LIMIT_D)
                        set_d(l, r, json_number_value(v));
                else
                        set_u(l, r, (uint64_t)json_integer_value(v));
        }
}

/* ---- fingerprint and description --------------------------------------- */

char *limits_fingerprint_text(const airlock_limits *l)
{
        dynbuf b;
        dynbuf_init(&b, 1u << 16);
        int r = 0;
        for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(limit_rows); i++) {
                const limit_row *row = &limit_rows[i];
                const char *sep = i ? " " : "";
                /* %a prints doubles exactly, so two limits differ in the text
                 * exactly when they differ in value. */
                if (row->type == LIMIT_D)
                        r = dynbuf_appendf(&b, "%s%s=%a", sep, row->name, get_d(l, row));
                else
                        r = dynbuf_appendf(&b, "%s%s=%llu", sep, row->name,
                                           (unsigned long long)get_u(l, row));
        }
        if (r < 0) {
                dynbuf_free(&b);
                return NULL;
        }
        return dynbuf_take(&b, NULL);
}

char *limits_description_text(const airlock_limits *l)
{
        dynbuf b;
        dynbuf_init(&b, 1u << 16);
        int r = dynbuf_appendf(&b, "%s", LIMITS_DESCRIPTION_BEFORE);
        /* The sentence has its own order (rank), not the struct's. */
        for (unsigned rank = 1; r >= 0 && rank <= ARRAY_SIZE(limit_rows); rank++)
                for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(limit_rows); i++) {
                        const limit_row *row = &limit_rows[i];
                        if (row->rank != rank)
                                continue;
                        char v[32];
                        if (row->type == LIMIT_D)
                                value_text(row, get_d(l, row), 0, v, sizeof(v));
                        else
                                value_text(row, 0, get_u(l, row), v, sizeof(v));
                        r = dynbuf_appendf(&b, "%s%s%s", row->before, v, row->after);
                }
        if (r >= 0)
                r = dynbuf_appendf(&b, "%s", LIMITS_DESCRIPTION_AFTER);
        if (r < 0) {
                dynbuf_free(&b);
                return NULL;
        }
        return dynbuf_take(&b, NULL);
}

/* ---- options ----------------------------------------------------------- */

const airlock_limit_option *airlock_limit_option_at(size_t i)
{
        for (size_t k = 0; k < ARRAY_SIZE(limit_rows); k++)
                if (limit_rows[k].option.name && i-- == 0)
                        return &limit_rows[k].option;
        return NULL;
}

static const limit_row *option_row(const char *name)
{
        for (size_t k = 0; name && k < ARRAY_SIZE(limit_rows); k++)
                if (limit_rows[k].option.name && strcmp(limit_rows[k].option.name, name) == 0)
                        return &limit_rows[k];
        return NULL;
}

/* The whole text must be a finite number in [lo, hi]. */
static int parse_double(const char *opt, const char *s, double lo, double hi, double *ret,
                        airlock_error *err)
{
        char *end = NULL;
        errno = 0;
        double v = strtod(s, &end);
        if (!*s || errno || !end || *end || !isfinite(v) || v < lo || v > hi)
                return al_error(err, -EINVAL, NULL, "--%s: '%s' is not a number in [%g, %g]", opt,
                                s, lo, hi);
        *ret = v;
        return 0;
}

/* The whole text must be digits, a number in [lo, hi]: no sign, no
 * exponent, no wrap-around past UINT64_MAX. */
static int parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *ret,
                     airlock_error *err)
{
        char *end = NULL;
        errno = 0;
        if (!*s || *s == '-' || *s == '+')
                goto bad;
        unsigned long long v = strtoull(s, &end, 10);
        if (!end || *end || (errno && errno != ERANGE))
                goto bad;
        if (errno == ERANGE || v < lo || v > hi)
                return al_error(err, -EINVAL, NULL,
                                "--%s: '%s' is out of range: a whole number from %llu to %llu", opt,
                                s, (unsigned long long)lo, (unsigned long long)hi);
        *ret = v;
        return 0;
bad:
        return al_error(err, -EINVAL, NULL, "--%s: '%s' is not a whole number in [%llu, %llu]", opt,
                        s, (unsigned long long)lo, (unsigned long long)hi);
}

int airlock_limits_set_option(airlock_limits *l, const char *name, const char *value,
                              airlock_error *err)
{
        const limit_row *r = option_row(name);
        if (!r || !row_fits(l, r))
                return al_error(err, -ENOENT, NULL, "no limit is set by the option '%s'",
                                name ? name : "");
        if (!value)
                return al_error(err, -EINVAL, NULL, "--%s needs a value", name);
        if (r->type == LIMIT_D) {
                double d = 0;
                int e = parse_double(name, value, r->dmin, r->dmax, &d, err);
                if (e < 0)
                        return e;
                set_d(l, r, d);
                return 0;
        }
        /* The range in the option's unit: whole units within the field's
         * range, so that the product below cannot overflow it. */
        uint64_t scale = unit_scale[r->unit];
        uint64_t u = 0;
        int e = parse_u64(name, value, (r->umin + scale - 1) / scale, r->umax / scale, &u, err);
        if (e < 0)
                return e;
        set_u(l, r, u * scale);
        return 0;
}

int airlock_limits_format_option(const airlock_limits *l, const char *name, char *buf, size_t size)
{
        const limit_row *r = option_row(name);
        if (!r || !row_fits(l, r))
                return -ENOENT;
        uint64_t scale = unit_scale[r->unit];
        int n;
        if (r->type == LIMIT_D)
                n = snprintf(buf, size, "%g", get_d(l, r));
        else if (get_u(l, r) % scale == 0)
                n = snprintf(buf, size, "%llu", (unsigned long long)(get_u(l, r) / scale));
        else
                n = snprintf(buf, size, "%g", (double)get_u(l, r) / (double)scale);
        if (n < 0)
                return -EINVAL;
        return (size_t)n < size ? n : -ENOBUFS;
}
