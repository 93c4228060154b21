/* What a cell shows, made safe for the notebook page (docs/jupyter.md,
 * "What a notebook sees").
 *
 * A notebook front-end runs what a kernel sends it: Jupyter Notebook
 * evaluates application/javascript and inserts text/html, SVG and rendered
 * markdown into its page, scripts and event attributes included, for every
 * output of a cell it executed. That page is the Notebook server's origin,
 * whose API writes files, opens terminals and starts other kernels on the
 * host. A kernel trusts its cells' code; this one runs untrusted code in a
 * sandbox, so what that code shows must not become a script outside it.
 *
 * So every bundle of representations the cell's side produced (display,
 * execute_result, inspect, user_expressions) keeps only types a page shows
 * without running anything: text/plain, images as base64, application/json,
 * and text/html rewritten from an allow-list of tags and attributes (a
 * table, text, lists and images in data: URLs; never a script, an event
 * attribute, a link, a frame, a form, SVG, MathML or CSS beyond a few
 * properties). The rewrite re-serialises: what it emits is only allowed
 * tags with double-quoted, escaped attributes and escaped text, so how a
 * browser would have parsed the original (a parser differential) does not
 * matter. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "kernel.h"

/* The longest HTML rewritten: a longer one (a huge table) is dropped, and
 * its text/plain shows instead. The kernel's records are capped at 64 MiB
 * already (KREC_MAX in kernel.c); the rewrite may add a few bytes per tag. */
#define KSAFE_HTML_MAX (80u << 20)

/* Elements kept, with the allowed attributes below. Any other element's
 * tags are dropped and its text kept, but for those of drop_whole. */
static const char *const ok_tags[] = {
    "table",    "thead", "tbody",  "tfoot", "tr",     "th",         "td",  "caption",
    "colgroup", "col",   "div",    "span",  "p",      "br",         "hr",  "b",
    "i",        "em",    "strong", "u",     "s",      "sub",        "sup", "small",
    "code",     "pre",   "kbd",    "samp",  "var",    "blockquote", "ul",  "ol",
    "li",       "dl",    "dt",     "dd",    "h1",     "h2",         "h3",  "h4",
    "h5",       "h6",    "abbr",   "img",   "figure", "figcaption",
};

/* Elements that have no end tag. */
static const char *const void_tags[] = {"br", "hr", "img", "col"};

/* Elements dropped with everything in them: their content is script, style
 * or markup in another parser's rules (SVG, MathML), or text that a browser
 * reads raw up to the element's end tag. */
static const char *const drop_whole[] = {
    "script",   "style",    "iframe", "object",   "embed",    "template",
    "noscript", "svg",      "math",   "textarea", "title",    "xmp",
    "noembed",  "noframes", "select", "applet",   "frameset",
};

/* Attributes kept on any kept element (values rewritten); img's src is
 * kept only as a data: URL of an image in base64, and style only as the
 * properties of ok_style. */
static const char *const ok_attrs[] = {"class",  "title", "align",  "valign", "colspan", "rowspan",
                                       "border", "width", "height", "alt",    "span"};

static const char *const ok_style[] = {
    "text-align", "vertical-align",   "font-weight", "font-style",      "font-size",
    "color",      "background-color", "white-space", "text-decoration", "width",
    "min-width",  "max-width",        "height",      "padding",         "margin",
    "border",     "border-collapse",
};

/* The rewrite's output: one append past the cap fails the whole rewrite,
 * never leaves a piece out (a ">" left out would make the text after it
 * attributes of the tag before it). */
typedef struct hout {
        dynbuf b;
        bool over;
} hout;

static void put(hout *o, const void *data, size_t len)
{
        if (!o->over && dynbuf_append(&o->b, data, len) < 0)
                o->over = true;
}

static bool in_list(const char *const *list, size_t n, const char *s, size_t len)
{
        for (size_t i = 0; i < n; i++)
                if (strlen(list[i]) == len && strncasecmp(list[i], s, len) == 0)
                        return true;
        return false;
}

#define IN(list, s, len) in_list(list, sizeof(list) / sizeof(list[0]), s, len)

static bool is_space(char c)
{
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f';
}

/* The length of a character reference at s ("&amp;", "&#60;", "&#x3c;"),
 * or 0 when s does not start one: a bare "&" is escaped instead. */
static size_t entity_len(const char *s, const char *end)
{
        const char *p = s + 1;
        if (p < end && *p == '#') {
                p++;
                bool hex = p < end && (*p == 'x' || *p == 'X');
                p += hex;
                const char *d = p;
                while (p < end && p - d < 8 &&
                       (hex ? isxdigit((unsigned char)*p) : isdigit((unsigned char)*p)))
                        p++;
                if (p == d)
                        return 0;
        } else {
                const char *d = p;
                while (p < end && p - d < 32 && isalnum((unsigned char)*p))
                        p++;
                if (p == d || !isalpha((unsigned char)*d))
                        return 0;
        }
        return p < end && *p == ';' ? (size_t)(p + 1 - s) : 0;
}

/* Text or an attribute's value, escaped: "<", ">", '"' and a bare "&"
 * become references; references already there stay as written. */
static void put_text(hout *o, const char *s, size_t len)
{
        const char *end = s + len;
        for (const char *p = s; p < end; p++) {
                size_t e;
                if (*p == '<')
                        put(o, "&lt;", 4);
                else if (*p == '>')
                        put(o, "&gt;", 4);
                else if (*p == '"')
                        put(o, "&quot;", 6);
                else if (*p == '&' && (e = entity_len(p, end)) > 0) {
                        put(o, p, e);
                        p += e - 1;
                } else if (*p == '&')
                        put(o, "&amp;", 5);
                else if (*p)
                        put(o, p, 1);
        }
}

static bool all_chars(const char *s, size_t len, const char *allowed)
{
        for (size_t i = 0; i < len; i++)
                if (!s[i] || !strchr(allowed, s[i]))
                        return false;
        return true;
}

#define B64_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/= \t\r\n"

/* An image's src: only a data: URL of a PNG, JPEG or GIF in base64. */
static bool ok_src(const char *v, size_t len)
{
        static const char *const heads[] = {"data:image/png;base64,", "data:image/jpeg;base64,",
                                            "data:image/gif;base64,"};
        for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
                size_t h = strlen(heads[i]);
                if (len >= h && strncasecmp(v, heads[i], h) == 0)
                        return all_chars(v + h, len - h, B64_CHARS);
        }
        return false;
}

/* A style attribute: the declarations of ok_style whose values hold only
 * letters, digits, spaces and "#%.,-" (no url(), no escape, no quote). */
static void put_style(hout *o, const char *v, size_t len)
{
        bool first = true;
        const char *end = v + len;
        for (const char *p = v; p < end;) {
                const char *semi = memchr(p, ';', (size_t)(end - p));
                const char *d_end = semi ? semi : end;
                const char *colon = memchr(p, ':', (size_t)(d_end - p));
                const char *n = p, *n_end = colon ? colon : d_end;
                while (n < n_end && is_space(*n))
                        n++;
                while (n_end > n && is_space(n_end[-1]))
                        n_end--;
                const char *val = colon ? colon + 1 : d_end;
                if (colon && IN(ok_style, n, (size_t)(n_end - n)) &&
                    all_chars(val, (size_t)(d_end - val),
                              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
                              "#%.,-")) {
                        if (!first)
                                put(o, "; ", 2);
                        put(o, n, (size_t)(n_end - n));
                        put(o, ":", 1);
                        put_text(o, val, (size_t)(d_end - val));
                        first = false;
                }
                p = semi ? semi + 1 : end;
        }
}

/* One attribute of a kept element, if allowed, as ` name="value"`. */
static void put_attr(hout *o, const char *tag, size_t tag_len, const char *name, size_t n_len,
                     const char *v, size_t v_len)
{
        if (n_len == 3 && strncasecmp(name, "src", 3) == 0 && tag_len == 3 &&
            strncasecmp(tag, "img", 3) == 0) {
                if (ok_src(v, v_len)) {
                        put(o, " src=\"", 6);
                        put_text(o, v, v_len);
                        put(o, "\"", 1);
                }
                return;
        }
        bool style = n_len == 5 && strncasecmp(name, "style", 5) == 0;
        if (!style && !IN(ok_attrs, name, n_len))
                return;
        put(o, " ", 1);
        for (size_t i = 0; i < n_len; i++)
                put(o, &(char){(char)tolower((unsigned char)name[i])}, 1);
        put(o, "=\"", 2);
        if (style)
                put_style(o, v, v_len);
        else
                put_text(o, v, v_len);
        put(o, "\"", 1);
}

/* Reads a tag's attributes from p (after its name) to its ">", putting
 * the allowed ones when keep. Returns the byte after the ">", or NULL when
 * the input ends first (the tag is then dropped). */
static const char *tag_attrs(hout *o, bool keep, const char *tag, size_t tag_len, const char *p,
                             const char *end)
{
        for (;;) {
                while (p < end && (is_space(*p) || *p == '/'))
                        p++;
                if (p >= end)
                        return NULL;
                if (*p == '>')
                        return p + 1;
                const char *name = p;
                while (p < end && !is_space(*p) && *p != '/' && *p != '>' && *p != '=')
                        p++;
                size_t n_len = (size_t)(p - name);
                while (p < end && is_space(*p))
                        p++;
                const char *v = p, *v_end = p;
                if (p < end && *p == '=') {
                        p++;
                        while (p < end && is_space(*p))
                                p++;
                        if (p < end && (*p == '"' || *p == '\'')) {
                                const char *q = memchr(p + 1, *p, (size_t)(end - p - 1));
                                if (!q)
                                        return NULL;
                                v = p + 1;
                                v_end = q;
                                p = q + 1;
                        } else {
                                v = p;
                                while (p < end && !is_space(*p) && *p != '>')
                                        p++;
                                v_end = p;
                        }
                }
                if (keep && n_len)
                        put_attr(o, tag, tag_len, name, n_len, v, (size_t)(v_end - v));
        }
}

/* Skips an element dropped whole, from after its start tag: up to the end
 * tag of its name (counting nested ones of that name), or the input's end.
 */
static const char *skip_whole(const char *p, const char *end, const char *name, size_t len)
{
        int depth = 1;
        while (p < end) {
                const char *lt = memchr(p, '<', (size_t)(end - p));
                if (!lt)
                        return end;
                const char *q = lt + 1;
                bool close = q < end && *q == '/';
                q += close;
                if ((size_t)(end - q) >= len && strncasecmp(q, name, len) == 0 &&
                    (q + len == end || !isalnum((unsigned char)q[len]))) {
                        depth += close ? -1 : 1;
                        if (depth == 0) {
                                const char *gt = memchr(q, '>', (size_t)(end - q));
                                return gt ? gt + 1 : end;
                        }
                }
                p = q;
        }
        return end;
}

/* One markup construct at p (a "<"): put what is kept of it; returns the
 * byte after it. */
static const char *markup(hout *o, const char *p, const char *end)
{
        const char *q = p + 1;
        if ((size_t)(end - q) >= 3 && memcmp(q, "!--", 3) == 0) {
                const char *c = memmem(q + 3, (size_t)(end - q - 3), "-->", 3);
                return c ? c + 3 : end; /* a comment: dropped */
        }
        if (q < end && (*q == '!' || *q == '?')) {
                const char *gt = memchr(q, '>', (size_t)(end - q));
                return gt ? gt + 1 : end; /* a doctype, CDATA or processing instruction */
        }
        bool close = q < end && *q == '/';
        q += close;
        if (q >= end || !isalpha((unsigned char)*q)) {
                put(o, "&lt;", 4); /* a "<" of the text */
                return p + 1;
        }
        const char *name = q;
        while (q < end && (isalnum((unsigned char)*q) || *q == '-'))
                q++;
        size_t len = (size_t)(q - name);
        bool keep = IN(ok_tags, name, len) && !(close && IN(void_tags, name, len));
        size_t mark = o->b.len;
        if (keep) {
                put(o, close ? "</" : "<", close ? 2 : 1);
                for (size_t i = 0; i < len; i++)
                        put(o, &(char){(char)tolower((unsigned char)name[i])}, 1);
        }
        const char *after = tag_attrs(o, keep && !close, name, len, q, end);
        if (!after) {
                o->b.len = mark; /* a tag the input never closes: dropped */
                return end;
        }
        if (keep)
                put(o, ">", 1);
        if (!close && IN(drop_whole, name, len))
                return skip_whole(after, end, name, len);
        return after;
}

char *ksafe_html(const char *in, size_t len)
{
        hout o = {.over = false};
        dynbuf_init(&o.b, KSAFE_HTML_MAX);
        const char *p = in, *end = in + len;
        while (p < end && !o.over) {
                const char *lt = memchr(p, '<', (size_t)(end - p));
                const char *t_end = lt ? lt : end;
                put_text(&o, p, (size_t)(t_end - p));
                p = lt ? markup(&o, lt, end) : end;
        }
        put(&o, "", 1);
        if (o.over) {
                dynbuf_free(&o.b);
                return NULL;
        }
        return dynbuf_take(&o.b, NULL);
}

/* Types kept as they are (text/html is rewritten; images must be base64). */
static const char *const ok_types[] = {"text/plain", "application/json"};
static const char *const image_types[] = {"image/png", "image/jpeg", "image/gif"};

json_t *ksafe_bundle(const json_t *data)
{
        json_t *out = json_object();
        if (!out || !json_is_object(data))
                return out;
        char dropped[256] = "";
        const char *type;
        json_t *v;
        json_object_foreach ((json_t *)data, type, v) {
                size_t tl = strlen(type);
                const char *s = json_string_value(v);
                _cleanup_free_ char *h = s && strcmp(type, "text/html") == 0
                                             ? ksafe_html(s, json_string_length(v))
                                             : NULL;
                if (IN(ok_types, type, tl)) {
                        json_object_set(out, type, v);
                } else if (s && IN(image_types, type, tl) &&
                           all_chars(s, json_string_length(v), B64_CHARS)) {
                        json_object_set(out, type, v);
                } else if (h) {
                        json_object_set_new(out, type, json_string(h));
                } else if (strlen(dropped) + tl + 3 < sizeof(dropped)) {
                        snprintf(dropped + strlen(dropped), sizeof(dropped) - strlen(dropped),
                                 "%s%s", dropped[0] ? ", " : "", type);
                }
        }
        if (json_object_size(out) == 0 && dropped[0]) {
                char note[400];
                snprintf(note, sizeof(note),
                         "[airlock: not shown: %s, which the notebook page would run as a "
                         "script outside the sandbox]",
                         dropped);
                json_object_set_new(out, "text/plain", json_string(note));
        }
        return out;
}
