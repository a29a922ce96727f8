/* Minimal recursive-descent JSON parser (RFC 8259 subset: no surrogate-pair decoding beyond BMP->UTF-8). */
#include "json.h"
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *s; size_t pos; char *err; size_t errlen; int depth; } parser;

static void perr(parser *p, const char *msg) {
    if (p->err && p->err[0] == 0) snprintf(p->err, p->errlen, "%s at offset %zu", msg, p->pos);
}
static void skip_ws(parser *p) {
    for (;;) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->pos++;
        else break;
    }
}
static jval *newv(jtype t) { jval *v = calloc(1, sizeof *v); if (v) v->type = t; return v; }
static jval *parse_value(parser *p);

static void put_utf8(char *out, size_t *o, unsigned cp) {
    if (cp < 0x80) out[(*o)++] = (char)cp;
    else if (cp < 0x800) { out[(*o)++] = (char)(0xC0 | (cp >> 6)); out[(*o)++] = (char)(0x80 | (cp & 0x3F)); }
    else { out[(*o)++] = (char)(0xE0 | (cp >> 12)); out[(*o)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
           out[(*o)++] = (char)(0x80 | (cp & 0x3F)); }
}

static char *parse_string(parser *p) {
    if (p->s[p->pos] != '"') { perr(p, "expected string"); return NULL; }
    p->pos++;
    size_t start = p->pos, len = 0;
    while (p->s[start + len] && p->s[start + len] != '"') { if (p->s[start + len] == '\\' && p->s[start + len + 1]) len++; len++; }
    char *out = malloc(len * 2 + 1), c;
    size_t o = 0;
    if (!out) { perr(p, "out of memory"); return NULL; }
    while ((c = p->s[p->pos]) != '"') {
        if (c == 0) { perr(p, "unterminated string"); free(out); return NULL; }
        if ((unsigned char)c < 0x20) { perr(p, "control character in string"); free(out); return NULL; }
        if (c == '\\') {
            char e = p->s[++p->pos];
            switch (e) {
            case '"': out[o++] = '"'; break;  case '\\': out[o++] = '\\'; break;
            case '/': out[o++] = '/'; break;  case 'b': out[o++] = '\b'; break;
            case 'f': out[o++] = '\f'; break; case 'n': out[o++] = '\n'; break;
            case 'r': out[o++] = '\r'; break; case 't': out[o++] = '\t'; break;
            case 'u': {
                unsigned cp = 0;
                for (int i = 1; i <= 4; i++) {
                    char h = p->s[p->pos + i];
                    if (!isxdigit((unsigned char)h)) { perr(p, "bad \\u escape"); free(out); return NULL; }
                    cp = cp * 16 + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
                }
                p->pos += 4;
                put_utf8(out, &o, cp);
                break;
            }
            default: perr(p, "bad escape"); free(out); return NULL;
            }
            p->pos++;
        } else { out[o++] = c; p->pos++; }
    }
    p->pos++;
    out[o] = 0;
    return out;
}

static int add_item(jval *v, char *key, jval *item) {
    jval **ni = realloc(v->items, (v->n + 1) * sizeof *ni);
    if (!ni) return -1;
    v->items = ni;
    if (v->type == J_OBJ) {
        char **nk = realloc(v->keys, (v->n + 1) * sizeof *nk);
        if (!nk) return -1;
        v->keys = nk;
        v->keys[v->n] = key;
    }
    v->items[v->n++] = item;
    return 0;
}

static jval *parse_container(parser *p, int obj) {
    jval *v = newv(obj ? J_OBJ : J_ARR);
    if (!v) { perr(p, "out of memory"); return NULL; }
    if (++p->depth > 64) { perr(p, "nesting too deep"); json_free(v); return NULL; }
    p->pos++;
    skip_ws(p);
    if (p->s[p->pos] == (obj ? '}' : ']')) { p->pos++; p->depth--; return v; }
    for (;;) {
        char *key = NULL;
        skip_ws(p);
        if (obj) {
            key = parse_string(p);
            if (!key) { json_free(v); return NULL; }
            skip_ws(p);
            if (p->s[p->pos] != ':') { perr(p, "expected ':'"); free(key); json_free(v); return NULL; }
            p->pos++;
        }
        jval *item = parse_value(p);
        if (!item || add_item(v, key, item)) { free(key); json_free(item); json_free(v); perr(p, "bad value"); return NULL; }
        skip_ws(p);
        char c = p->s[p->pos];
        if (c == ',') { p->pos++; continue; }
        if (c == (obj ? '}' : ']')) { p->pos++; break; }
        perr(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        json_free(v);
        return NULL;
    }
    p->depth--;
    return v;
}

static jval *parse_value(parser *p) {
    skip_ws(p);
    const char *s = p->s + p->pos;
    if (*s == '{') return parse_container(p, 1);
    if (*s == '[') return parse_container(p, 0);
    if (*s == '"') {
        char *str = parse_string(p);
        if (!str) return NULL;
        jval *v = newv(J_STR);
        if (!v) { free(str); return NULL; }
        v->str = str;
        return v;
    }
    if (!strncmp(s, "true", 4)) { p->pos += 4; jval *v = newv(J_BOOL); if (v) v->boolean = 1; return v; }
    if (!strncmp(s, "false", 5)) { p->pos += 5; return newv(J_BOOL); }
    if (!strncmp(s, "null", 4)) { p->pos += 4; return newv(J_NULL); }
    if (*s == '-' || isdigit((unsigned char)*s)) {
        size_t i = (*s == '-');
        int is_int = 1;
        if (!isdigit((unsigned char)s[i])) { perr(p, "bad number"); return NULL; }
        while (isdigit((unsigned char)s[i])) i++;
        if (s[i] == '.') { is_int = 0; i++; if (!isdigit((unsigned char)s[i])) { perr(p, "bad number"); return NULL; } while (isdigit((unsigned char)s[i])) i++; }
        if (s[i] == 'e' || s[i] == 'E') {
            is_int = 0; i++;
            if (s[i] == '+' || s[i] == '-') i++;
            if (!isdigit((unsigned char)s[i])) { perr(p, "bad number"); return NULL; }
            while (isdigit((unsigned char)s[i])) i++;
        }
        jval *v = newv(J_NUM);
        if (!v) return NULL;
        char buf[64];
        size_t n = i < sizeof buf - 1 ? i : sizeof buf - 1;
        memcpy(buf, s, n); buf[n] = 0;
        v->num = strtod(buf, NULL);
        v->is_int = is_int;
        if (is_int) { errno = 0; v->inum = strtoll(buf, NULL, 10); if (errno) { v->is_int = 0; } }
        else v->inum = (long long)v->num;
        p->pos += i;
        return v;
    }
    perr(p, "unexpected character");
    return NULL;
}

jval *json_parse(const char *text, char *err, size_t errlen) {
    parser p = { text, 0, err, errlen, 0 };
    if (err && errlen) err[0] = 0;
    if (!text) { perr(&p, "no input"); return NULL; }
    if ((unsigned char)text[0] == 0xEF && (unsigned char)text[1] == 0xBB && (unsigned char)text[2] == 0xBF) p.pos = 3;
    jval *v = parse_value(&p);
    if (!v) { perr(&p, "parse error"); return NULL; }
    skip_ws(&p);
    if (p.s[p.pos] != 0) { perr(&p, "trailing characters"); json_free(v); return NULL; }
    return v;
}

void json_free(jval *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        json_free(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items); free(v->keys); free(v->str); free(v);
}

const jval *json_get(const jval *obj, const char *key) {
    if (!obj || obj->type != J_OBJ) return NULL;
    for (size_t i = obj->n; i-- > 0;)   /* last duplicate wins */
        if (!strcmp(obj->keys[i], key)) return obj->items[i];
    return NULL;
}
const jval *json_at(const jval *arr, size_t i) {
    if (!arr || (arr->type != J_ARR && arr->type != J_OBJ) || i >= arr->n) return NULL;
    return arr->items[i];
}
long long json_int(const jval *v, long long dflt) {
    if (!v) return dflt;
    if (v->type == J_NUM) return v->is_int ? v->inum : (long long)v->num;
    if (v->type == J_BOOL) return v->boolean;
    if (v->type == J_STR && v->str[0]) {
        char *end; errno = 0;
        long long r = strtoll(v->str, &end, 0);
        if (errno == ERANGE) { unsigned long long u = strtoull(v->str, &end, 0); r = (long long)u; }
        if (*end == 0) return r;
    }
    return dflt;
}
int json_is_true(const jval *v, int dflt) {
    if (!v || v->type == J_NULL) return dflt;
    if (v->type == J_BOOL) return v->boolean;
    if (v->type == J_NUM) return v->num != 0;
    if (v->type == J_STR) return !strcmp(v->str, "true") || !strcmp(v->str, "1") || !strcmp(v->str, "yes") || !strcmp(v->str, "on");
    return dflt;
}
const char *json_str(const jval *v, const char *dflt) {
    return (v && v->type == J_STR) ? v->str : dflt;
}
void json_write_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { fputc('\\', f); fputc(c, f); }
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}
