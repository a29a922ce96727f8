/* Minimal JSON DOM parser for the NVML simulator (inventory + state files). */
#ifndef NVML_SIM_JSON_H
#define NVML_SIM_JSON_H
#include <stddef.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype type;
    int boolean;
    double num;
    long long inum;          /* exact value when the literal was an integer */
    int is_int;
    char *str;               /* J_STR */
    size_t n;                /* J_ARR / J_OBJ element count */
    struct jval **items;     /* J_ARR / J_OBJ values */
    char **keys;             /* J_OBJ keys */
} jval;

/* Parses text; on error returns NULL and writes a message (with offset) to err. */
jval *json_parse(const char *text, char *err, size_t errlen);
void json_free(jval *v);
const jval *json_get(const jval *obj, const char *key);   /* NULL if missing / not object */
const jval *json_at(const jval *arr, size_t i);
/* Typed accessors with defaults.  Numbers may also be given as strings ("0x20B210DE", "12"). */
long long json_int(const jval *v, long long dflt);
int json_is_true(const jval *v, int dflt);
const char *json_str(const jval *v, const char *dflt);
/* Writes s as a JSON string literal (with quotes) to f. */
#include <stdio.h>
void json_write_str(FILE *f, const char *s);
#endif
