/* NVML simulator: a libnvidia-ml.so.1 that answers from a JSON inventory plus a
 * cross-process JSON state file.  Compiled against NVIDIA's own nvml.h. */
#define _GNU_SOURCE
#include "sim.h"
#include "json.h"
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define DEFAULT_INVENTORY "/etc/nvml-sim/inventory.json"
#define DEFAULT_STATE     "/var/lib/nvml-sim/state.json"
#define MIB (1024ULL * 1024ULL)

/* ------------------------------------------------------------------ types */
typedef struct { unsigned id, profile_id, start, size; } ci_state;
typedef struct { unsigned id, profile_id, start, size; unsigned nci; ci_state ci[SIM_MAX_CI]; } gi_state;
typedef struct {
    unsigned mig_cur, mig_pend, persistence, compute_mode;
    unsigned ngi; gi_state gi[SIM_MAX_GI];
    unsigned resets, reset_tries;        /* GPU resets done; reset attempts answered IN_USE (nvmlSimResetGpu) */
} gpu_state;

typedef struct {
    char name[96], uuid[96], serial[32], board_part[32], vbios[32];
    unsigned domain, bus, dev;
    unsigned pci_device_id, pci_subsystem_id;
    unsigned long long mem_total, mem_reserved, mem_used, bar1_total, bar1_used;
    int cc_major, cc_minor;
    unsigned arch, brand, minor, num_cores, bus_width, sm_count;
    int mig_capable, mig_apply;          /* mig_apply: -1 = use global */
    sim_mig_table custom_table;
    const sim_mig_table *table;
    unsigned power_mw, power_limit_mw, power_default_mw, power_min_mw, power_max_mw;
    unsigned temp, util_gpu, util_mem, pstate;
    unsigned clocks[NVML_CLOCK_COUNT], max_clocks[NVML_CLOCK_COUNT];
    int ecc_supported, ecc_cur, ecc_pend, display_mode, display_active, virt_mode;
    unsigned pcie_gen, pcie_width, pcie_max_gen, pcie_max_width;
    unsigned nvlinks;                    /* NVLinks to the NVSwitch fabric (0 = none) */
    unsigned long long nvlink_inactive;  /* bit i: link i answers NVML_FEATURE_DISABLED */
    unsigned long long nvlink_err[NVML_NVLINK_MAX_LINKS][NVML_NVLINK_ERROR_COUNT];   /* nvmlDeviceGetNvLinkErrorCounter */
    int inforom_valid;                   /* nvmlDeviceValidateInforom: 1 SUCCESS, 0 CORRUPTED_INFOROM, -1 NOT_SUPPORTED */
    /* health: absent inventory keys answer NOT_SUPPORTED unless a default is noted */
    int rr_supported; unsigned rr_corr, rr_unc, rr_pending, rr_failure;
    int rr_hist_supported; unsigned rr_hist[5];          /* max, high, partial, low, none */
    int rp_supported; unsigned rp_sbe, rp_dbe, rp_pending;
    nvmlReturn_t rp_dbe_unsupported;                      /* double-bit query without retired_pages */
    unsigned long long ecc_counts[2][2];                 /* [NVML_MEMORY_ERROR_TYPE_*][NVML_VOLATILE/AGGREGATE_ECC] */
    unsigned long long clk_reasons, clk_reasons_supported;   /* default 1 (GPU idle) and 0x1FF, as a healthy H100 */
    unsigned pcie_gpu_max_gen, pcie_replay;
    unsigned long long event_types;                      /* default 0xFF9F, as the H100 on 580 */
    unsigned nxid; unsigned long long xid[16];           /* Xid critical errors delivered to an event set */
    unsigned xid_after_ms;                               /* ... that long after the set registered the GPU */
    int temp_slowdown, temp_shutdown;                    /* -1: NOT_SUPPORTED */
    char inforom[32], gsp_fw[32]; int gsp_mode[2];       /* "" / -1: NOT_SUPPORTED */
    int profile_info_without_mig;                        /* GI profile info answered with MIG disabled (580) */
    int fabric_state;                                    /* NVML_GPU_FABRIC_STATE_*; -1 NOT_SUPPORTED, -2 default */
    int recovery_action;                                 /* NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; -1 NOT_SUPPORTED */
    nvmlReturn_t fabric_status; unsigned fabric_health_mask;
    int reset_supported; unsigned reset_in_use;          /* reset: NOT_SUPPORTED when 0; the first N attempts IN_USE */
    gpu_state init;
} sim_gpu;

typedef struct { char func[80]; int gpu; nvmlReturn_t rc; } err_rule;

enum { H_MIGDEV = 1, H_GI = 2, H_CI = 3 };
#define H_MAGIC 0x4E564D4CU
struct nvmlDevice_st { unsigned magic; int kind; int gpu; unsigned gi, ci; };
typedef struct nvmlDevice_st sim_handle;   /* same layout used for GI/CI handles (cast) */

typedef struct {
    int gpu; sim_gpu *g; gpu_state *s;
    int is_mig; gi_state *gi; ci_state *ci;
    const sim_gi_profile *gp;
} devref;

/* ----------------------------------------------------------------- globals */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_ref;
static char g_driver[80], g_nvml_ver[80];
static int g_cuda;
static int g_mig_apply;            /* global mig_apply_immediately */
static int g_require_root;
static unsigned g_ngpus;
static sim_gpu g_gpus[SIM_MAX_GPUS];
static gpu_state g_state[SIM_MAX_GPUS];
static struct nvmlDevice_st g_gpu_handles[SIM_MAX_GPUS];
static err_rule *g_errs; static size_t g_nerrs;
static sim_handle **g_pool; static size_t g_npool;
static char g_state_path[PATH_MAX];
static int g_lock_fd = -1;
/* NVSwitch fabric: switches from the inventory's "nvswitches" list; every GPU's NVLinks lead to them. */
#define SIM_MAX_SWITCHES 16
static unsigned g_nswitch;
static unsigned g_switch_dom[SIM_MAX_SWITCHES], g_switch_bus[SIM_MAX_SWITCHES], g_switch_dev[SIM_MAX_SWITCHES];
static unsigned g_switch_devid[SIM_MAX_SWITCHES];

static void logmsg(const char *fmt, ...) {
    va_list ap; va_start(ap, fmt);
    fputs("nvml-sim: ", stderr); vfprintf(stderr, fmt, ap); fputc('\n', stderr);
    va_end(ap);
}

/* ---------------------------------------------------------- error names */
static const struct { const char *name; nvmlReturn_t rc; const char *text; } err_names[] = {
    { "SUCCESS", NVML_SUCCESS, "Success" },
    { "UNINITIALIZED", NVML_ERROR_UNINITIALIZED, "Uninitialized" },
    { "INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument" },
    { "NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED, "Not Supported" },
    { "NO_PERMISSION", NVML_ERROR_NO_PERMISSION, "Insufficient Permissions" },
    { "ALREADY_INITIALIZED", NVML_ERROR_ALREADY_INITIALIZED, "Already Initialized" },
    { "NOT_FOUND", NVML_ERROR_NOT_FOUND, "Not Found" },
    { "INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size" },
    { "INSUFFICIENT_POWER", NVML_ERROR_INSUFFICIENT_POWER, "Insufficient External Power" },
    { "DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded" },
    { "TIMEOUT", NVML_ERROR_TIMEOUT, "Timeout" },
    { "IRQ_ISSUE", NVML_ERROR_IRQ_ISSUE, "Interrupt request issue" },
    { "LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found" },
    { "FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found" },
    { "CORRUPTED_INFOROM", NVML_ERROR_CORRUPTED_INFOROM, "Corrupted infoROM" },
    { "GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST, "GPU is lost" },
    { "RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED, "GPU requires restart" },
    { "OPERATING_SYSTEM", NVML_ERROR_OPERATING_SYSTEM, "The operating system has blocked the request." },
    { "LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH, "RM has detected an NVML/RM version mismatch." },
    { "IN_USE", NVML_ERROR_IN_USE, "In use by another client" },
    { "MEMORY", NVML_ERROR_MEMORY, "Insufficient Memory" },
    { "NO_DATA", NVML_ERROR_NO_DATA, "No data" },
    { "VGPU_ECC_NOT_SUPPORTED", NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "ECC is not supported on vGPU" },
    { "INSUFFICIENT_RESOURCES", NVML_ERROR_INSUFFICIENT_RESOURCES, "Insufficient resources" },
    { "FREQ_NOT_SUPPORTED", NVML_ERROR_FREQ_NOT_SUPPORTED, "Frequency not supported" },
    { "ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "Argument version mismatch" },
    { "DEPRECATED", NVML_ERROR_DEPRECATED, "Deprecated" },
    { "NOT_READY", NVML_ERROR_NOT_READY, "Not ready" },
    { "GPU_NOT_FOUND", NVML_ERROR_GPU_NOT_FOUND, "GPU not found" },
    { "INVALID_STATE", NVML_ERROR_INVALID_STATE, "Invalid state" },
    { "UNKNOWN", NVML_ERROR_UNKNOWN, "Unknown Error" },
};

static int parse_err_name(const char *s, nvmlReturn_t *out) {
    if (!s || !*s) return -1;
    if (!strncasecmp(s, "NVML_ERROR_", 11)) s += 11;
    else if (!strncasecmp(s, "NVML_", 5)) s += 5;
    for (size_t i = 0; i < sizeof err_names / sizeof err_names[0]; i++)
        if (!strcasecmp(err_names[i].name, s)) { *out = err_names[i].rc; return 0; }
    char *end; long v = strtol(s, &end, 0);
    if (*end == 0) { *out = (nvmlReturn_t)v; return 0; }
    return -1;
}

/* ------------------------------------------------------- error injection */
static int add_rule(const char *func, int gpu, const char *errname) {
    nvmlReturn_t rc;
    if (parse_err_name(errname, &rc)) { logmsg("unknown error name '%s' for %s", errname, func); return -1; }
    err_rule *n = realloc(g_errs, (g_nerrs + 1) * sizeof *n);
    if (!n) return -1;
    g_errs = n;
    snprintf(g_errs[g_nerrs].func, sizeof g_errs[g_nerrs].func, "%s", func);
    g_errs[g_nerrs].gpu = gpu;
    g_errs[g_nerrs].rc = rc;
    g_nerrs++;
    return 0;
}

/* "func[:gpu]" -> rule */
static int add_rule_spec(const char *spec, int gpu_default, const char *errname) {
    char func[96]; int gpu = gpu_default;
    snprintf(func, sizeof func, "%s", spec);
    char *colon = strchr(func, ':');
    if (colon) { *colon = 0; gpu = atoi(colon + 1); }
    return add_rule(func, gpu, errname);
}

static int parse_env_errors(const char *env) {
    if (!env || !*env) return 0;
    char *copy = strdup(env), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",;", &save); tok; tok = strtok_r(NULL, ",;", &save)) {
        while (isspace((unsigned char)*tok)) tok++;
        if (!*tok) continue;
        char *eq = strchr(tok, '=');
        if (!eq) { logmsg("NVML_SIM_ERRORS: '%s' lacks '=ERROR'", tok); rc = -1; continue; }
        *eq = 0;
        if (add_rule_spec(tok, -1, eq + 1)) rc = -1;
    }
    free(copy);
    return rc;
}

/* base name: strip trailing _vN or V suffix so "nvmlDeviceGetMemoryInfo" also matches _v2 */
static void base_name(const char *in, char *out, size_t len) {
    snprintf(out, len, "%s", in);
    size_t n = strlen(out);
    size_t i = n;
    while (i > 0 && isdigit((unsigned char)out[i - 1])) i--;
    if (i < n && i >= 2 && out[i - 1] == 'v' && out[i - 2] == '_') { out[i - 2] = 0; return; }
    if (n > 1 && out[n - 1] == 'V' && islower((unsigned char)out[n - 2])) out[n - 1] = 0;
}

static int is_init_name(const char *f) { return !strncmp(f, "nvmlInit", 8); }

/* gpu < 0 : call not tied to a GPU */
static nvmlReturn_t injected(const char *func, int gpu) {
    char base[96];
    base_name(func, base, sizeof base);
    for (size_t i = 0; i < g_nerrs; i++) {
        const err_rule *r = &g_errs[i];
        if (r->gpu >= 0 && r->gpu != gpu) continue;
        int match = !strcmp(r->func, func) || !strcmp(r->func, base) ||
                    (is_init_name(func) && !strcmp(r->func, "nvmlInit")) ||
                    (!strcmp(r->func, "*") && gpu >= 0);
        if (match) return r->rc;
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------ inventory */
static char *read_file(const char *path, int *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { *err = errno; return NULL; }
    size_t cap = 8192, len = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len - 1 == 0) { char *nb = realloc(buf, cap *= 2); if (!nb) { free(buf); buf = NULL; } else buf = nb; }
    }
    fclose(f);
    if (!buf) { *err = ENOMEM; return NULL; }
    buf[len] = 0;
    *err = 0;
    return buf;
}

static unsigned enum_or_int(const jval *v, const char *const *names, unsigned n, unsigned dflt, const char *what, int *bad) {
    if (!v) return dflt;
    if (v->type == J_STR) {
        for (unsigned i = 0; i < n; i++)
            if (names[i] && !strcasecmp(names[i], v->str)) return i;
        long long x = json_int(v, -1);
        if (x >= 0) return (unsigned)x;
        logmsg("inventory: unknown %s '%s'", what, v->str); *bad = 1;
        return dflt;
    }
    return (unsigned)json_int(v, dflt);
}

static const char *const arch_names[] = { NULL, NULL, "kepler", "maxwell", "pascal", "volta", "turing", "ampere",
                                          "ada", "hopper", "blackwell" };
static const char *const brand_names[] = { "unknown", "quadro", "tesla", "nvs", "grid", "geforce", "titan",
    "nvidia_vapps", "nvidia_vpc", "nvidia_vcs", "nvidia_vws", "nvidia_cloud_gaming", "quadro_rtx", "nvidia_rtx", "nvidia" };
static const char *const cmode_names[] = { "default", "exclusive_thread", "prohibited", "exclusive_process" };

static unsigned long long mem_field(const jval *gpu, const char *bytes_key, const char *mib_key, unsigned long long dflt) {
    const jval *b = json_get(gpu, bytes_key), *m = json_get(gpu, mib_key);
    if (b) return (unsigned long long)json_int(b, 0);
    if (m) return (unsigned long long)json_int(m, 0) * MIB;
    return dflt;
}

static const sim_gi_profile *gi_profile_by_id(const sim_mig_table *t, unsigned id) {
    if (!t) return NULL;
    for (unsigned i = 0; i < t->n; i++) if (t->p[i].id == id) return &t->p[i];
    return NULL;
}
static const sim_gi_profile *gi_profile_by_index(const sim_mig_table *t, unsigned idx) {
    if (!t) return NULL;
    for (unsigned i = 0; i < t->n; i++) if (t->p[i].index == idx) return &t->p[i];
    return NULL;
}
static const sim_gi_profile *gi_profile_by_name(const sim_mig_table *t, const char *name) {
    if (!t) return NULL;
    if (!strncasecmp(name, "MIG ", 4)) name += 4;
    for (unsigned i = 0; i < t->n; i++) if (!strcasecmp(t->p[i].name, name)) return &t->p[i];
    return NULL;
}

static int parse_custom_table(const jval *o, sim_mig_table *t, int *bad) {
    memset(t, 0, sizeof *t);
    t->key = "custom";
    t->mem_slices = (unsigned)json_int(json_get(o, "memory_slices"), 8);
    t->max_mig_devices = (unsigned)json_int(json_get(o, "max_mig_devices"), 7);
    const jval *ps = json_get(o, "profiles");
    if (!ps || ps->type != J_ARR || ps->n == 0 || ps->n > SIM_MAX_PROFILES) { logmsg("inventory: custom mig table needs 1..%d profiles", SIM_MAX_PROFILES); *bad = 1; return -1; }
    for (size_t i = 0; i < ps->n; i++) {
        const jval *p = ps->items[i];
        sim_gi_profile *q = &t->p[t->n++];
        q->index = (unsigned)json_int(json_get(p, "index"), 0);
        q->id = (unsigned)json_int(json_get(p, "id"), 0);
        snprintf(q->name, sizeof q->name, "%s", json_str(json_get(p, "name"), "custom"));
        q->slices = (unsigned)json_int(json_get(p, "slices"), 1);
        q->instances = (unsigned)json_int(json_get(p, "instances"), 1);
        q->sms = (unsigned)json_int(json_get(p, "sms"), 14 * q->slices);
        q->ce = (unsigned)json_int(json_get(p, "copy_engines"), q->slices);
        q->dec = (unsigned)json_int(json_get(p, "decoders"), 0);
        q->enc = (unsigned)json_int(json_get(p, "encoders"), 0);
        q->jpg = (unsigned)json_int(json_get(p, "jpegs"), 0);
        q->ofa = (unsigned)json_int(json_get(p, "ofas"), 0);
        q->mem_mb = (unsigned long long)json_int(json_get(p, "memory_mib"), 0);
        q->psize = (unsigned)json_int(json_get(p, "placement_size"), q->slices);
        const jval *st = json_get(p, "placements");
        for (size_t k = 0; st && st->type == J_ARR && k < st->n && k < 8; k++) q->starts[q->nstarts++] = (unsigned)json_int(st->items[k], 0);
        if (!q->nstarts || !q->psize || q->psize > t->mem_slices) { logmsg("inventory: custom profile %s needs placements", q->name); *bad = 1; return -1; }
    }
    return 0;
}

/* --- MIG geometry helpers (shared by inventory bootstrap and the API) --- */
static unsigned gi_mask(unsigned start, unsigned size) { return ((1U << size) - 1U) << start; }
static unsigned used_mask(const gpu_state *s) {
    unsigned m = 0;
    for (unsigned i = 0; i < s->ngi; i++) m |= gi_mask(s->gi[i].start, s->gi[i].size);
    return m;
}
static unsigned gi_id_for(const sim_mig_table *t, unsigned start, unsigned size) {
    return (t->mem_slices / size - 1) + start / size;   /* binary-tree ("swizzle") numbering */
}
static unsigned count_profile(const gpu_state *s, unsigned pid) {
    unsigned c = 0;
    for (unsigned i = 0; i < s->ngi; i++) if (s->gi[i].profile_id == pid) c++;
    return c;
}
/* -1 = no free placement */
static int gi_find_start(const sim_gi_profile *p, unsigned mask) {
    for (unsigned k = 0; k < p->nstarts; k++)
        if (!(mask & gi_mask(p->starts[k], p->psize))) return (int)p->starts[k];
    return -1;
}
static unsigned gi_remaining(const sim_gi_profile *p, const gpu_state *s) {
    unsigned have = count_profile(s, p->id);
    if (have >= p->instances || s->ngi >= SIM_MAX_GI) return 0;
    unsigned mask = used_mask(s), n = 0;
    int st;
    while ((st = gi_find_start(p, mask)) >= 0) { mask |= gi_mask((unsigned)st, p->psize); n++; }
    unsigned lim = p->instances - have;
    return n < lim ? n : lim;
}
static nvmlReturn_t gi_create(const sim_mig_table *t, gpu_state *s, const sim_gi_profile *p, int start, gi_state **out) {
    if (start >= 0) {
        int ok = 0;
        for (unsigned k = 0; k < p->nstarts; k++) if (p->starts[k] == (unsigned)start) ok = 1;
        if (!ok) return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (count_profile(s, p->id) >= p->instances || s->ngi >= SIM_MAX_GI) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    unsigned mask = used_mask(s);
    if (start < 0) start = gi_find_start(p, mask);
    if (start < 0 || (mask & gi_mask((unsigned)start, p->psize))) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    gi_state *g = &s->gi[s->ngi++];
    memset(g, 0, sizeof *g);
    g->id = gi_id_for(t, (unsigned)start, p->psize);
    g->profile_id = p->id;
    g->start = (unsigned)start;
    g->size = p->psize;
    if (out) *out = g;
    return NVML_SUCCESS;
}

/* Compute-instance profiles are derived from the GPU instance's slice count. */
static const unsigned ci_index_for_slices[9] = { 99, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
    NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, 99, NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
    NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE };
typedef struct { unsigned id, slices, instances, sms, nstarts, starts[8]; char name[48]; } ci_profile;

static int ci_profile_get(const sim_gi_profile *gp, unsigned pid, ci_profile *out) {
    for (unsigned c = 1; c <= 8; c++) {
        if (ci_index_for_slices[c] != pid) continue;
        if (c > gp->slices || (c > 4 && c != gp->slices)) return -1;
        memset(out, 0, sizeof *out);
        out->id = pid; out->slices = c;
        out->sms = gp->sms * c / gp->slices;
        if (c == 3 && gp->slices >= 7) { out->starts[0] = 0; out->starts[1] = 4; out->nstarts = 2; }
        else for (unsigned st = 0; st + c <= gp->slices && out->nstarts < 8; st += c) out->starts[out->nstarts++] = st;
        out->instances = out->nstarts;
        if (c == gp->slices) snprintf(out->name, sizeof out->name, "%s", gp->name);
        else snprintf(out->name, sizeof out->name, "%uc.%s", c, gp->name);
        return 0;
    }
    return -1;
}
static unsigned ci_used_mask(const gi_state *g) {
    unsigned m = 0;
    for (unsigned i = 0; i < g->nci; i++) m |= gi_mask(g->ci[i].start, g->ci[i].size);
    return m;
}
static int ci_find_start(const ci_profile *p, unsigned mask) {
    for (unsigned k = 0; k < p->nstarts; k++)
        if (!(mask & gi_mask(p->starts[k], p->slices))) return (int)p->starts[k];
    return -1;
}
static unsigned ci_remaining(const ci_profile *p, const gi_state *g) {
    unsigned mask = ci_used_mask(g), n = 0;
    int st;
    if (g->nci >= SIM_MAX_CI) return 0;
    while ((st = ci_find_start(p, mask)) >= 0) { mask |= gi_mask((unsigned)st, p->slices); n++; }
    return n;
}
static nvmlReturn_t ci_create(gi_state *g, const ci_profile *p, int start, ci_state **out) {
    unsigned mask = ci_used_mask(g);
    if (start >= 0) {
        int ok = 0;
        for (unsigned k = 0; k < p->nstarts; k++) if (p->starts[k] == (unsigned)start) ok = 1;
        if (!ok) return NVML_ERROR_INVALID_ARGUMENT;
    } else start = ci_find_start(p, mask);
    if (start < 0 || g->nci >= SIM_MAX_CI || (mask & gi_mask((unsigned)start, p->slices))) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    unsigned id = 0;
    for (;; id++) {
        int used = 0;
        for (unsigned i = 0; i < g->nci; i++) if (g->ci[i].id == id) used = 1;
        if (!used) break;
    }
    ci_state *c = &g->ci[g->nci++];
    c->id = id; c->profile_id = p->id; c->start = (unsigned)start; c->size = p->slices;
    if (out) *out = c;
    return NVML_SUCCESS;
}

static int parse_initial_geometry(sim_gpu *g, const jval *arr, int *bad) {
    if (!arr) return 0;
    if (arr->type != J_ARR) { logmsg("inventory: mig_instances must be a list"); *bad = 1; return -1; }
    for (size_t i = 0; i < arr->n; i++) {
        const jval *o = arr->items[i], *pv = json_get(o, "profile");
        const sim_gi_profile *p = (pv && pv->type == J_STR) ? gi_profile_by_name(g->table, pv->str) : NULL;
        if (!p && pv && pv->type == J_STR && json_int(pv, -1) >= 0) p = gi_profile_by_id(g->table, (unsigned)json_int(pv, 0));
        if (!p && pv && pv->type == J_NUM) p = gi_profile_by_id(g->table, (unsigned)json_int(pv, 0));
        if (!p) { logmsg("inventory: %s: unknown MIG profile in mig_instances[%zu]", g->name, i); *bad = 1; return -1; }
        gi_state *gs;
        if (gi_create(g->table, &g->init, p, (int)json_int(json_get(o, "placement"), -1), &gs) != NVML_SUCCESS) {
            logmsg("inventory: %s: mig_instances[%zu] (%s) does not fit", g->name, i, p->name); *bad = 1; return -1;
        }
        const jval *cis = json_get(o, "compute_instances");
        if (!cis) {
            ci_profile cp;
            ci_profile_get(p, ci_index_for_slices[p->slices], &cp);
            ci_create(gs, &cp, -1, NULL);
            continue;
        }
        for (size_t k = 0; cis->type == J_ARR && k < cis->n; k++) {
            const jval *c = cis->items[k], *cv = json_get(c, "profile");
            ci_profile cp; int found = 0;
            if (!cv) cv = c;
            if (cv->type == J_STR && json_int(cv, -1) < 0) {
                for (unsigned s = 1; s <= 8 && !found; s++)
                    if (!ci_profile_get(p, ci_index_for_slices[s], &cp) && !strcasecmp(cp.name, cv->str)) found = 1;
            } else found = !ci_profile_get(p, (unsigned)json_int(cv, 99), &cp);
            if (!found || ci_create(gs, &cp, (int)json_int(json_get(c, "placement"), -1), NULL) != NVML_SUCCESS) {
                logmsg("inventory: %s: bad compute instance %zu in mig_instances[%zu]", g->name, k, i); *bad = 1; return -1;
            }
        }
    }
    return 0;
}

static void guess_table(sim_gpu *g) {
    if (strstr(g->name, "A100")) g->table = sim_find_mig_table(g->mem_total > 48ULL * 1024 * MIB ? "A100-SXM4-80GB" : "A100-SXM4-40GB");
    else if (strstr(g->name, "H100") && strcasestr(g->name, "PCIe")) g->table = sim_find_mig_table("H100-PCIE-80GB");
    else if (strstr(g->name, "H100")) g->table = sim_find_mig_table("H100-SXM5-80GB");
    else if (strstr(g->name, "A30")) g->table = sim_find_mig_table("A30-24GB");
}

/* GPU health answers; see README "Health" for the keys and their defaults. */
static void parse_health(const jval *o, sim_gpu *g, int *bad) {
    const jval *rr = json_get(o, "remapped_rows");
    g->rr_supported = rr && rr->type == J_OBJ;
    if (g->rr_supported) {
        g->rr_corr = (unsigned)json_int(json_get(rr, "correctable"), 0);
        g->rr_unc = (unsigned)json_int(json_get(rr, "uncorrectable"), 0);
        g->rr_pending = (unsigned)json_is_true(json_get(rr, "pending"), 0);
        g->rr_failure = (unsigned)json_is_true(json_get(rr, "failure"), 0);
    } else if (rr && rr->type != J_NULL) { logmsg("inventory: remapped_rows must be an object"); *bad = 1; }
    const jval *h = json_get(o, "row_remapper_histogram");
    g->rr_hist_supported = h && h->type == J_OBJ;
    const char *hn[5] = { "max", "high", "partial", "low", "none" };
    for (int i = 0; g->rr_hist_supported && i < 5; i++) g->rr_hist[i] = (unsigned)json_int(json_get(h, hn[i]), 0);
    const jval *rp = json_get(o, "retired_pages");
    g->rp_supported = rp && rp->type == J_OBJ;
    if (g->rp_supported) {
        g->rp_sbe = (unsigned)json_int(json_get(rp, "single_bit"), 0);
        g->rp_dbe = (unsigned)json_int(json_get(rp, "double_bit"), 0);
        g->rp_pending = (unsigned)json_is_true(json_get(rp, "pending"), 0);
    }
    /* the double-bit query where the GPU retires no pages: INVALID_ARGUMENT as the real H100 answered, NOT_SUPPORTED
     * as the real H200 did (same driver 580.159.04) */
    g->rp_dbe_unsupported = NVML_ERROR_INVALID_ARGUMENT;
    const jval *rpe = json_get(o, "retired_pages_double_bit_error");
    if (rpe && parse_err_name(json_str(rpe, ""), &g->rp_dbe_unsupported)) {
        logmsg("inventory: bad retired_pages_double_bit_error"); *bad = 1;
    }
    const jval *e = json_get(o, "ecc_errors");
    const char *en[2][2] = { { "corrected_volatile", "corrected_aggregate" }, { "uncorrected_volatile", "uncorrected_aggregate" } };
    for (int t = 0; t < 2; t++) for (int c = 0; c < 2; c++) g->ecc_counts[t][c] = (unsigned long long)json_int(json_get(e, en[t][c]), 0);
    g->clk_reasons = (unsigned long long)json_int(json_get(o, "clocks_event_reasons"), 1);
    g->clk_reasons_supported = (unsigned long long)json_int(json_get(o, "supported_clocks_event_reasons"), 0x1FF);
    g->pcie_gpu_max_gen = (unsigned)json_int(json_get(o, "pcie_gpu_max_link_gen"), g->pcie_max_gen);
    g->pcie_replay = (unsigned)json_int(json_get(o, "pcie_replay_counter"), 0);
    g->event_types = (unsigned long long)json_int(json_get(o, "supported_event_types"), 0xFF9F);
    /* the GPU recovery action field (nvml.h: 570+); absent: -2, decided from the driver version at nvmlInit */
    g->recovery_action = (int)json_int(json_get(o, "recovery_action"), -2);
    g->reset_supported = json_is_true(json_get(o, "reset_supported"), 1);
    g->reset_in_use = (unsigned)json_int(json_get(o, "reset_in_use"), 0);
    const jval *x = json_get(o, "xid_events");
    if (x && x->type == J_ARR) {
        if (x->n > 16) { logmsg("inventory: at most 16 xid_events"); *bad = 1; }
        for (size_t i = 0; i < x->n && i < 16; i++) g->xid[g->nxid++] = (unsigned long long)json_int(x->items[i], 999);
    } else if (x) { logmsg("inventory: xid_events must be a list of Xid numbers"); *bad = 1; }
    g->xid_after_ms = (unsigned)json_int(json_get(o, "xid_events_after_ms"), 0);
    g->temp_slowdown = (int)json_int(json_get(o, "temperature_slowdown_c"), -1);
    g->temp_shutdown = (int)json_int(json_get(o, "temperature_shutdown_c"), -1);
    snprintf(g->inforom, sizeof g->inforom, "%s", json_str(json_get(o, "inforom_image_version"), ""));
    /* nvmlDeviceValidateInforom: absent -> SUCCESS where the GPU has an InfoROM image (the real H100 on 580 answered
     * success), NOT_SUPPORTED otherwise; false -> CORRUPTED_INFOROM; null -> NOT_SUPPORTED */
    const jval *iv = json_get(o, "inforom_valid");
    if (!iv) g->inforom_valid = g->inforom[0] ? 1 : -1;
    else if (iv->type == J_NULL) g->inforom_valid = -1;
    else if (iv->type == J_BOOL) g->inforom_valid = json_is_true(iv, 1);
    else { logmsg("inventory: inforom_valid must be true, false or null"); *bad = 1; }
    /* NVLink faults: "nvlink_inactive": [link, ...]; "nvlink_errors": {"<link>": {"replay": n, "recovery": n,
     * "crc_flit": n, "crc_data": n, "ecc_data": n}} (absent counters 0) */
    const jval *ni = json_get(o, "nvlink_inactive");
    for (size_t i = 0; ni && ni->type == J_ARR && i < ni->n; i++) {
        long long l = json_int(ni->items[i], -1);
        if (l < 0 || l >= NVML_NVLINK_MAX_LINKS) { logmsg("inventory: bad link in nvlink_inactive"); *bad = 1; continue; }
        g->nvlink_inactive |= 1ULL << l;
    }
    if (ni && ni->type != J_ARR) { logmsg("inventory: nvlink_inactive must be a list of link numbers"); *bad = 1; }
    const jval *ne = json_get(o, "nvlink_errors");
    static const char *const ctr_names[NVML_NVLINK_ERROR_COUNT] = { "replay", "recovery", "crc_flit", "crc_data", "ecc_data" };
    for (size_t i = 0; ne && ne->type == J_OBJ && i < ne->n; i++) {
        char *end = NULL;
        long l = strtol(ne->keys[i], &end, 10);
        if (!end || *end || l < 0 || l >= NVML_NVLINK_MAX_LINKS || ne->items[i]->type != J_OBJ) {
            logmsg("inventory: nvlink_errors: bad link '%s'", ne->keys[i]); *bad = 1; continue;
        }
        for (int c = 0; c < NVML_NVLINK_ERROR_COUNT; c++)
            g->nvlink_err[l][c] = (unsigned long long)json_int(json_get(ne->items[i], ctr_names[c]), 0);
    }
    if (ne && ne->type != J_OBJ) { logmsg("inventory: nvlink_errors must be an object keyed by link"); *bad = 1; }
    snprintf(g->gsp_fw, sizeof g->gsp_fw, "%s", json_str(json_get(o, "gsp_firmware_version"), ""));
    const jval *gm = json_get(o, "gsp_firmware_mode");
    g->gsp_mode[0] = g->gsp_mode[1] = -1;
    if (gm && gm->type == J_ARR && gm->n == 2) { g->gsp_mode[0] = (int)json_int(gm->items[0], 0); g->gsp_mode[1] = (int)json_int(gm->items[1], 0); }
    g->profile_info_without_mig = json_is_true(json_get(o, "mig_profile_info_without_mig"), 0);
    /* NVLink fabric registration (nvmlDeviceGetGpuFabricInfo(V)): default completed/success for a Hopper or newer
     * GPU with NVLinks to NVSwitches, NOT_SUPPORTED otherwise */
    static const char *const fs_names[] = { "not_supported", "not_started", "in_progress", "completed" };
    const jval *fs = json_get(o, "fabric_state");
    g->fabric_state = fs ? (int)enum_or_int(fs, fs_names, 4, 0, "fabric_state", bad) : -2;
    g->fabric_status = NVML_SUCCESS;
    const jval *fst = json_get(o, "fabric_status");
    if (fst && parse_err_name(json_str(fst, ""), &g->fabric_status)) { logmsg("inventory: bad fabric_status"); *bad = 1; }
    g->fabric_health_mask = (unsigned)json_int(json_get(o, "fabric_health_mask"), 0);
}

static int parse_gpu(const jval *o, unsigned idx, sim_gpu *g) {
    int bad = 0;
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", json_str(json_get(o, "name"), "NVIDIA Simulated GPU"));
    const char *uuid = json_str(json_get(o, "uuid"), NULL);
    if (uuid) snprintf(g->uuid, sizeof g->uuid, "%s", uuid);
    else snprintf(g->uuid, sizeof g->uuid, "GPU-5e1a0000-0000-4000-8000-%012x", idx);
    snprintf(g->serial, sizeof g->serial, "%s", json_str(json_get(o, "serial"), ""));
    snprintf(g->board_part, sizeof g->board_part, "%s", json_str(json_get(o, "board_part_number"), ""));
    snprintf(g->vbios, sizeof g->vbios, "%s", json_str(json_get(o, "vbios_version"), "00.00.00.00.00"));
    const char *bus = json_str(json_get(o, "pci_bus_id"), NULL);
    if (bus) {
        unsigned d = 0, b = 0, v = 0, f = 0;
        if (sscanf(bus, "%x:%x:%x.%x", &d, &b, &v, &f) != 4) { logmsg("inventory: bad pci_bus_id '%s'", bus); bad = 1; }
        g->domain = d; g->bus = b; g->dev = v;
    } else { g->bus = 0x10 + idx; }
    g->pci_device_id = (unsigned)json_int(json_get(o, "pci_device_id"), 0x000010DE);
    g->pci_subsystem_id = (unsigned)json_int(json_get(o, "pci_subsystem_id"), 0);
    g->mem_total = mem_field(o, "memory_total_bytes", "memory_total_mib", 16ULL * 1024 * MIB);
    g->mem_reserved = mem_field(o, "memory_reserved_bytes", "memory_reserved_mib", 0);
    g->mem_used = mem_field(o, "memory_used_bytes", "memory_used_mib", 0);
    g->bar1_total = mem_field(o, "bar1_total_bytes", "bar1_total_mib", 256 * MIB);
    g->bar1_used = mem_field(o, "bar1_used_bytes", "bar1_used_mib", 2 * MIB);
    const jval *cc = json_get(o, "compute_capability");
    g->cc_major = 7; g->cc_minor = 0;
    if (cc && cc->type == J_STR) { if (sscanf(cc->str, "%d.%d", &g->cc_major, &g->cc_minor) != 2) { logmsg("inventory: bad compute_capability"); bad = 1; } }
    else if (cc && cc->type == J_ARR && cc->n == 2) { g->cc_major = (int)json_int(cc->items[0], 0); g->cc_minor = (int)json_int(cc->items[1], 0); }
    else if (cc) { logmsg("inventory: compute_capability must be \"X.Y\" or [X, Y]"); bad = 1; }
    g->arch = enum_or_int(json_get(o, "architecture"), arch_names, 11, NVML_DEVICE_ARCH_UNKNOWN, "architecture", &bad);
    g->brand = enum_or_int(json_get(o, "brand"), brand_names, 15, NVML_BRAND_NVIDIA, "brand", &bad);
    g->minor = (unsigned)json_int(json_get(o, "minor_number"), idx);
    g->num_cores = (unsigned)json_int(json_get(o, "num_gpu_cores"), 0);
    g->sm_count = (unsigned)json_int(json_get(o, "multiprocessor_count"), 0);
    g->nvlinks = (unsigned)json_int(json_get(o, "nvlink_count"), 0);   /* 0: default from the fabric */
    if (g->nvlinks > NVML_NVLINK_MAX_LINKS) { logmsg("inventory: nvlink_count > %d", NVML_NVLINK_MAX_LINKS); bad = 1; }
    g->bus_width = (unsigned)json_int(json_get(o, "memory_bus_width"), 0);
    g->mig_capable = json_is_true(json_get(o, "mig_capable"), 0);
    g->mig_apply = json_get(o, "mig_apply_immediately") ? json_is_true(json_get(o, "mig_apply_immediately"), 0) : -1;
    g->power_mw = (unsigned)json_int(json_get(o, "power_usage_mw"), 30000);
    g->power_limit_mw = (unsigned)json_int(json_get(o, "power_limit_mw"), 250000);
    g->power_default_mw = (unsigned)json_int(json_get(o, "power_default_limit_mw"), g->power_limit_mw);
    g->power_min_mw = (unsigned)json_int(json_get(o, "power_min_limit_mw"), g->power_limit_mw / 2);
    g->power_max_mw = (unsigned)json_int(json_get(o, "power_max_limit_mw"), g->power_limit_mw);
    g->temp = (unsigned)json_int(json_get(o, "temperature_c"), 35);
    g->util_gpu = (unsigned)json_int(json_get(o, "utilization_gpu"), 0);
    g->util_mem = (unsigned)json_int(json_get(o, "utilization_memory"), 0);
    g->pstate = (unsigned)json_int(json_get(o, "performance_state"), 0);
    const char *clk_names[NVML_CLOCK_COUNT] = { "graphics", "sm", "mem", "video" };
    const jval *clk = json_get(o, "clocks_mhz"), *mclk = json_get(o, "max_clocks_mhz");
    for (int i = 0; i < NVML_CLOCK_COUNT; i++) {
        g->max_clocks[i] = (unsigned)json_int(json_get(mclk, clk_names[i]), i == NVML_CLOCK_MEM ? 1215 : 1410);
        g->clocks[i] = (unsigned)json_int(json_get(clk, clk_names[i]), g->max_clocks[i]);
    }
    g->ecc_supported = json_get(o, "ecc_mode") != NULL && json_get(o, "ecc_mode")->type != J_NULL;
    g->ecc_cur = g->ecc_pend = json_is_true(json_get(o, "ecc_mode"), 0);
    g->display_mode = json_is_true(json_get(o, "display_mode"), 0);
    g->display_active = json_is_true(json_get(o, "display_active"), 0);
    g->virt_mode = (int)json_int(json_get(o, "virtualization_mode"), NVML_GPU_VIRTUALIZATION_MODE_NONE);
    g->pcie_gen = (unsigned)json_int(json_get(o, "pcie_link_gen"), 4);
    g->pcie_width = (unsigned)json_int(json_get(o, "pcie_link_width"), 16);
    g->pcie_max_gen = (unsigned)json_int(json_get(o, "pcie_max_link_gen"), g->pcie_gen);
    g->pcie_max_width = (unsigned)json_int(json_get(o, "pcie_max_link_width"), g->pcie_width);

    parse_health(o, g, &bad);

    const jval *tv = json_get(o, "mig_profile_table");
    if (g->mig_capable) {
        if (tv && tv->type == J_STR) {
            g->table = sim_find_mig_table(tv->str);
            if (!g->table) { logmsg("inventory: unknown mig_profile_table '%s' (known: %s)", tv->str, sim_mig_table_keys()); bad = 1; }
        } else if (tv && tv->type == J_OBJ) {
            if (!parse_custom_table(tv, &g->custom_table, &bad)) g->table = &g->custom_table;
        } else guess_table(g);
        if (!g->table && !bad) { logmsg("inventory: %s is mig_capable but has no mig_profile_table", g->name); bad = 1; }
    }
    g->init.persistence = json_is_true(json_get(o, "persistence_mode"), 0);
    g->init.compute_mode = enum_or_int(json_get(o, "compute_mode"), cmode_names, 4, NVML_COMPUTEMODE_DEFAULT, "compute_mode", &bad);
    g->init.mig_cur = json_is_true(json_get(o, "mig_mode"), 0);
    g->init.mig_pend = json_get(o, "mig_pending_mode") ? (unsigned)json_is_true(json_get(o, "mig_pending_mode"), 0) : g->init.mig_cur;
    if ((g->init.mig_cur || g->init.mig_pend) && !g->mig_capable) { logmsg("inventory: %s has mig_mode but is not mig_capable", g->name); bad = 1; }
    if (!bad && g->init.mig_cur) parse_initial_geometry(g, json_get(o, "mig_instances"), &bad);
    else if (json_get(o, "mig_instances") && !g->init.mig_cur) { logmsg("inventory: %s: mig_instances requires mig_mode true", g->name); bad = 1; }

    const jval *errs = json_get(o, "errors");
    for (size_t i = 0; errs && errs->type == J_OBJ && i < errs->n; i++)
        if (add_rule(errs->keys[i], (int)idx, json_str(errs->items[i], ""))) bad = 1;
    return bad ? -1 : 0;
}

static void free_config(void) {
    free(g_errs); g_errs = NULL; g_nerrs = 0;
    g_ngpus = 0;
}

/* Returns NVML_SUCCESS or the init error. */
static nvmlReturn_t load_config(void) {
    free_config();
    if (parse_env_errors(getenv("NVML_SIM_ERRORS"))) return NVML_ERROR_UNKNOWN;
    nvmlReturn_t inj = injected("nvmlInit", -1);
    if (inj != NVML_SUCCESS) return inj;

    const char *path = getenv("NVML_SIM_INVENTORY");
    if (!path || !*path) path = DEFAULT_INVENTORY;
    const char *sp = getenv("NVML_SIM_STATE");
    snprintf(g_state_path, sizeof g_state_path, "%s", (sp && *sp) ? sp : DEFAULT_STATE);
    int err;
    char *text = read_file(path, &err);
    if (!text) {
        if (getenv("NVML_SIM_DEBUG")) logmsg("cannot read inventory %s: %s", path, strerror(err));
        return NVML_ERROR_DRIVER_NOT_LOADED;     /* no "driver" = no inventory */
    }
    char perrbuf[160];
    jval *root = json_parse(text, perrbuf, sizeof perrbuf);
    free(text);
    if (!root || root->type != J_OBJ) { logmsg("inventory %s: %s", path, root ? "top level must be an object" : perrbuf); json_free(root); return NVML_ERROR_UNKNOWN; }

    int bad = 0;
    snprintf(g_driver, sizeof g_driver, "%s", json_str(json_get(root, "driver_version"), "535.183.01"));
    snprintf(g_nvml_ver, sizeof g_nvml_ver, "%s", json_str(json_get(root, "nvml_version"), "12.535.183.01"));
    g_cuda = (int)json_int(json_get(root, "cuda_driver_version"), 12020);
    g_mig_apply = json_is_true(json_get(root, "mig_apply_immediately"), 0);
    const char *envapply = getenv("NVML_SIM_MIG_APPLY_IMMEDIATELY");
    if (envapply && *envapply) g_mig_apply = (!strcmp(envapply, "1") || !strcasecmp(envapply, "true")) ? 1 : 0;
    g_require_root = json_is_true(json_get(root, "require_root_for_writes"), 0);
    const jval *errs = json_get(root, "errors");
    for (size_t i = 0; errs && errs->type == J_OBJ && i < errs->n; i++)
        if (add_rule_spec(errs->keys[i], -1, json_str(errs->items[i], ""))) bad = 1;
    g_nswitch = 0;
    const jval *sw = json_get(root, "nvswitches");
    for (size_t i = 0; sw && sw->type == J_ARR && i < sw->n; i++) {
        unsigned d = 0, b = 0, v = 0, f = 0;
        const char *bus = json_str(json_get(sw->items[i], "pci_bus_id"), "");
        if (g_nswitch >= SIM_MAX_SWITCHES || sscanf(bus, "%x:%x:%x.%x", &d, &b, &v, &f) != 4) {
            logmsg("inventory %s: bad nvswitches[%zu]", path, i); bad = 1; continue;
        }
        g_switch_dom[g_nswitch] = d; g_switch_bus[g_nswitch] = b; g_switch_dev[g_nswitch] = v;
        g_switch_devid[g_nswitch] = (unsigned)json_int(json_get(sw->items[i], "pci_device_id"), 0x1AF110DE);
        g_nswitch++;
    }
    const jval *gpus = json_get(root, "gpus");
    if (!gpus || gpus->type != J_ARR) { logmsg("inventory %s: 'gpus' list missing", path); bad = 1; }
    else if (gpus->n > SIM_MAX_GPUS) { logmsg("inventory %s: more than %d GPUs", path, SIM_MAX_GPUS); bad = 1; }
    else {
        for (size_t i = 0; i < gpus->n; i++) if (parse_gpu(gpus->items[i], (unsigned)i, &g_gpus[i])) bad = 1;
        g_ngpus = (unsigned)gpus->n;
    }
    json_free(root);
    if (bad) { free_config(); return NVML_ERROR_UNKNOWN; }
    for (unsigned i = 0; i < g_ngpus; i++) {
        g_gpu_handles[i].magic = H_MAGIC; g_gpu_handles[i].kind = 0; g_gpu_handles[i].gpu = (int)i;
    }
    return injected("nvmlInit", -1);
}

/* ----------------------------------------------------------------- state */
static void state_defaults(void) {
    for (unsigned i = 0; i < g_ngpus; i++) g_state[i] = g_gpus[i].init;
}

static int load_gi(const jval *o, gi_state *g) {
    g->id = (unsigned)json_int(json_get(o, "id"), 0);
    g->profile_id = (unsigned)json_int(json_get(o, "profile_id"), 0);
    g->start = (unsigned)json_int(json_get(o, "start"), 0);
    g->size = (unsigned)json_int(json_get(o, "size"), 1);
    g->nci = 0;
    const jval *cis = json_get(o, "compute_instances");
    for (size_t k = 0; cis && cis->type == J_ARR && k < cis->n && g->nci < SIM_MAX_CI; k++) {
        ci_state *c = &g->ci[g->nci++];
        c->id = (unsigned)json_int(json_get(cis->items[k], "id"), 0);
        c->profile_id = (unsigned)json_int(json_get(cis->items[k], "profile_id"), 0);
        c->start = (unsigned)json_int(json_get(cis->items[k], "start"), 0);
        c->size = (unsigned)json_int(json_get(cis->items[k], "size"), 1);
    }
    return 0;
}

/* Re-reads the state file (writers replace it atomically via rename, so readers need no lock). */
static nvmlReturn_t state_refresh(void) {
    state_defaults();
    int err;
    char *text = read_file(g_state_path, &err);
    if (!text) return (err == ENOENT || err == ENOTDIR) ? NVML_SUCCESS : (err == EACCES ? NVML_SUCCESS : NVML_ERROR_UNKNOWN);
    char perrbuf[160];
    jval *root = json_parse(text, perrbuf, sizeof perrbuf);
    free(text);
    if (!root) { logmsg("state %s: %s (ignored; using inventory defaults)", g_state_path, perrbuf); return NVML_SUCCESS; }
    const jval *gpus = json_get(root, "gpus");
    for (size_t k = 0; gpus && gpus->type == J_ARR && k < gpus->n; k++) {
        const jval *o = gpus->items[k];
        const char *uuid = json_str(json_get(o, "uuid"), "");
        for (unsigned i = 0; i < g_ngpus; i++) {
            if (strcasecmp(uuid, g_gpus[i].uuid)) continue;
            gpu_state *s = &g_state[i];
            s->mig_cur = (unsigned)json_int(json_get(o, "mig_current"), s->mig_cur);
            s->mig_pend = (unsigned)json_int(json_get(o, "mig_pending"), s->mig_pend);
            s->persistence = (unsigned)json_int(json_get(o, "persistence_mode"), s->persistence);
            s->compute_mode = (unsigned)json_int(json_get(o, "compute_mode"), s->compute_mode);
            s->resets = (unsigned)json_int(json_get(o, "resets"), s->resets);
            s->reset_tries = (unsigned)json_int(json_get(o, "reset_tries"), s->reset_tries);
            const jval *gis = json_get(o, "gpu_instances");
            if (gis && gis->type == J_ARR) {
                s->ngi = 0;
                for (size_t j = 0; j < gis->n && s->ngi < SIM_MAX_GI; j++) load_gi(gis->items[j], &s->gi[s->ngi++]);
            }
        }
    }
    json_free(root);
    return NVML_SUCCESS;
}

static nvmlReturn_t errno_rc(int e) { return (e == EACCES || e == EPERM || e == EROFS) ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_UNKNOWN; }

static int mkdir_p(const char *dir) {
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') { *p = 0; if (mkdir(tmp, 0755) && errno != EEXIST) return -1; *p = '/'; }
    if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
    return 0;
}

/* Exclusive lock (flock on "<state>.lock") + fresh read.  Pair with state_commit/state_abort. */
static nvmlReturn_t state_begin_write(void) {
    if (g_require_root && geteuid() != 0) return NVML_ERROR_NO_PERMISSION;
    char dir[PATH_MAX], lock[PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s", g_state_path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) { *slash = 0; if (mkdir_p(dir)) return errno_rc(errno); }
    snprintf(lock, sizeof lock, "%s.lock", g_state_path);
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return errno_rc(errno);
    while (flock(fd, LOCK_EX) != 0) { if (errno != EINTR) { close(fd); return NVML_ERROR_UNKNOWN; } }
    g_lock_fd = fd;
    return state_refresh();
}
static void state_abort(void) {
    if (g_lock_fd >= 0) { flock(g_lock_fd, LOCK_UN); close(g_lock_fd); g_lock_fd = -1; }
}
static nvmlReturn_t state_commit(void) {
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", g_state_path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) { nvmlReturn_t rc = errno_rc(errno); state_abort(); return rc; }
    fprintf(f, "{\n  \"version\": 1,\n  \"gpus\": [");
    for (unsigned i = 0; i < g_ngpus; i++) {
        const gpu_state *s = &g_state[i];
        fprintf(f, "%s\n    {\"index\": %u, \"uuid\": ", i ? "," : "", i);
        json_write_str(f, g_gpus[i].uuid);
        fprintf(f, ", \"mig_current\": %u, \"mig_pending\": %u, \"persistence_mode\": %u, \"compute_mode\": %u,\n     \"resets\": %u, \"reset_tries\": %u, \"gpu_instances\": [",
                s->mig_cur, s->mig_pend, s->persistence, s->compute_mode, s->resets, s->reset_tries);
        for (unsigned j = 0; j < s->ngi; j++) {
            const gi_state *g = &s->gi[j];
            fprintf(f, "%s\n       {\"id\": %u, \"profile_id\": %u, \"start\": %u, \"size\": %u, \"compute_instances\": [",
                    j ? "," : "", g->id, g->profile_id, g->start, g->size);
            for (unsigned k = 0; k < g->nci; k++)
                fprintf(f, "%s{\"id\": %u, \"profile_id\": %u, \"start\": %u, \"size\": %u}", k ? ", " : "",
                        g->ci[k].id, g->ci[k].profile_id, g->ci[k].start, g->ci[k].size);
            fprintf(f, "]}");
        }
        fprintf(f, "%s]}", s->ngi ? "\n     " : "");
    }
    fprintf(f, "\n  ]\n}\n");
    int bad = ferror(f);
    if (fflush(f) || fsync(fileno(f))) bad = 1;
    if (fclose(f)) bad = 1;
    if (bad || rename(tmp, g_state_path)) { int e = errno; unlink(tmp); state_abort(); return errno_rc(e); }
    state_abort();
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- handles */
static sim_handle *pool_get(int kind, int gpu, unsigned gi, unsigned ci) {
    for (size_t i = 0; i < g_npool; i++) {
        sim_handle *h = g_pool[i];
        if (h->kind == kind && h->gpu == gpu && h->gi == gi && h->ci == ci) return h;
    }
    sim_handle **np = realloc(g_pool, (g_npool + 1) * sizeof *np);
    if (!np) return NULL;
    g_pool = np;
    sim_handle *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->magic = H_MAGIC; h->kind = kind; h->gpu = gpu; h->gi = gi; h->ci = ci;
    g_pool[g_npool++] = h;
    return h;
}
static const sim_handle *pool_find(const void *p, int kind) {
    for (size_t i = 0; i < g_npool; i++) if (g_pool[i] == p && g_pool[i]->kind == kind) return g_pool[i];
    return NULL;
}
static gi_state *find_gi(gpu_state *s, unsigned id) {
    for (unsigned i = 0; i < s->ngi; i++) if (s->gi[i].id == id) return &s->gi[i];
    return NULL;
}
static ci_state *find_ci(gi_state *g, unsigned id) {
    for (unsigned i = 0; i < g->nci; i++) if (g->ci[i].id == id) return &g->ci[i];
    return NULL;
}

/* Resolve a device handle; flags: allow MIG device handles. */
#define ALLOW_MIG 1
static nvmlReturn_t dev_enter(const char *fn, nvmlDevice_t h, int flags, devref *R) {
    memset(R, 0, sizeof *R);
    if (!g_ref) return NVML_ERROR_UNINITIALIZED;
    if (!h) return NVML_ERROR_INVALID_ARGUMENT;
    const sim_handle *sh = NULL;
    if (h >= &g_gpu_handles[0] && h < &g_gpu_handles[g_ngpus]) sh = h;
    else if (!(sh = pool_find(h, H_MIGDEV))) return NVML_ERROR_INVALID_ARGUMENT;
    R->gpu = sh->gpu; R->g = &g_gpus[sh->gpu]; R->s = &g_state[sh->gpu];
    nvmlReturn_t rc = injected(fn, R->gpu);
    if (rc != NVML_SUCCESS) return rc;
    if ((rc = state_refresh()) != NVML_SUCCESS) return rc;
    if (sh->kind == H_MIGDEV) {
        R->is_mig = 1;
        if (!R->s->mig_cur || !(R->gi = find_gi(R->s, sh->gi)) || !(R->ci = find_ci(R->gi, sh->ci))) return NVML_ERROR_INVALID_ARGUMENT;
        R->gp = gi_profile_by_id(R->g->table, R->gi->profile_id);
        if (!(flags & ALLOW_MIG)) return NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}
static nvmlReturn_t gi_enter(const char *fn, nvmlGpuInstance_t h, devref *R) {
    memset(R, 0, sizeof *R);
    if (!g_ref) return NVML_ERROR_UNINITIALIZED;
    const sim_handle *sh = pool_find(h, H_GI);
    if (!sh) return NVML_ERROR_INVALID_ARGUMENT;
    R->gpu = sh->gpu; R->g = &g_gpus[sh->gpu]; R->s = &g_state[sh->gpu];
    nvmlReturn_t rc = injected(fn, R->gpu);
    if (rc != NVML_SUCCESS) return rc;
    if ((rc = state_refresh()) != NVML_SUCCESS) return rc;
    if (!R->s->mig_cur || !(R->gi = find_gi(R->s, sh->gi))) return NVML_ERROR_INVALID_ARGUMENT;
    R->gp = gi_profile_by_id(R->g->table, R->gi->profile_id);
    return R->gp ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
static nvmlReturn_t ci_enter(const char *fn, nvmlComputeInstance_t h, devref *R) {
    memset(R, 0, sizeof *R);
    if (!g_ref) return NVML_ERROR_UNINITIALIZED;
    const sim_handle *sh = pool_find(h, H_CI);
    if (!sh) return NVML_ERROR_INVALID_ARGUMENT;
    R->gpu = sh->gpu; R->g = &g_gpus[sh->gpu]; R->s = &g_state[sh->gpu];
    nvmlReturn_t rc = injected(fn, R->gpu);
    if (rc != NVML_SUCCESS) return rc;
    if ((rc = state_refresh()) != NVML_SUCCESS) return rc;
    if (!R->s->mig_cur || !(R->gi = find_gi(R->s, sh->gi)) || !(R->ci = find_ci(R->gi, sh->ci))) return NVML_ERROR_INVALID_ARGUMENT;
    R->gp = gi_profile_by_id(R->g->table, R->gi->profile_id);
    return R->gp ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
/* After state_begin_write() the state arrays were re-read: re-resolve GI/CI pointers by id. */
static nvmlReturn_t reresolve(devref *R, unsigned gi_id, int ci_id) {
    R->gi = NULL; R->ci = NULL;
    if (!R->s->mig_cur || !(R->gi = find_gi(R->s, gi_id))) return NVML_ERROR_INVALID_ARGUMENT;
    if (ci_id >= 0 && !(R->ci = find_ci(R->gi, (unsigned)ci_id))) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

#define LOCK()   pthread_mutex_lock(&g_mu)
#define UNLOCK() pthread_mutex_unlock(&g_mu)
#define DEV_BEGIN_N(name, h, flags) devref R; nvmlReturn_t rc; LOCK(); \
    if ((rc = dev_enter((name), (h), (flags), &R)) != NVML_SUCCESS) { UNLOCK(); return rc; }
#define DEV_BEGIN(h, flags) DEV_BEGIN_N(__func__, h, flags)
#define GI_BEGIN(h) devref R; nvmlReturn_t rc; LOCK(); \
    if ((rc = gi_enter(__func__, (h), &R)) != NVML_SUCCESS) { UNLOCK(); return rc; }
#define CI_BEGIN_N(name, h) devref R; nvmlReturn_t rc; LOCK(); \
    if ((rc = ci_enter((name), (h), &R)) != NVML_SUCCESS) { UNLOCK(); return rc; }
#define CI_BEGIN(h) CI_BEGIN_N(__func__, h)
#define SYS_BEGIN_N(name) nvmlReturn_t rc; LOCK(); \
    if (!g_ref) { UNLOCK(); return NVML_ERROR_UNINITIALIZED; } \
    if ((rc = injected((name), -1)) != NVML_SUCCESS) { UNLOCK(); return rc; }
#define SYS_BEGIN() SYS_BEGIN_N(__func__)
#define END(x) do { rc = (x); UNLOCK(); return rc; } while (0)

static nvmlReturn_t copy_str(char *dst, unsigned len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* MIG device identity */
static void mig_uuid(const sim_gpu *g, unsigned gi, unsigned ci, char *out, size_t len) {
    uint64_t h1 = 1469598103934665603ULL, h2 = 1099511628211ULL * 31;
    char key[160];
    snprintf(key, sizeof key, "%s/%u/%u", g->uuid, gi, ci);
    for (const char *p = key; *p; p++) { h1 = (h1 ^ (unsigned char)*p) * 1099511628211ULL; h2 = (h2 ^ (unsigned char)*p) * 0x100000001b3ULL + 7; }
    snprintf(out, len, "MIG-%08x-%04x-5%03x-%04x-%012llx", (unsigned)(h1 >> 32), (unsigned)(h1 >> 16) & 0xffff,
             (unsigned)h1 & 0xfff, 0x8000 | ((unsigned)(h2 >> 48) & 0x3fff), (unsigned long long)(h2 & 0xffffffffffffULL));
}
static void mig_name(const devref *R, char *out, size_t len) {
    ci_profile cp;
    if (R->gp && !ci_profile_get(R->gp, R->ci->profile_id, &cp)) snprintf(out, len, "%s MIG %s", R->g->name, cp.name);
    else snprintf(out, len, "%s MIG", R->g->name);
}

/* ======================================================== init / system */
static nvmlReturn_t do_init(const char *fn) {
    LOCK();
    nvmlReturn_t rc = NVML_SUCCESS;
    if (g_ref == 0) {
        rc = load_config();
        if (rc == NVML_SUCCESS) rc = state_refresh();
        if (rc == NVML_SUCCESS) g_ref = 1;
        else free_config();
    } else if ((rc = injected(fn, -1)) == NVML_SUCCESS) g_ref++;
    UNLOCK();
    return rc;
}
EXPORT nvmlReturn_t nvmlInit(void) { return do_init(__func__); }
EXPORT nvmlReturn_t nvmlInit_v2(void) { return do_init(__func__); }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return do_init(__func__); }
EXPORT nvmlReturn_t nvmlShutdown(void) {
    LOCK();
    nvmlReturn_t rc = NVML_SUCCESS;
    if (!g_ref) rc = NVML_ERROR_UNINITIALIZED;
    else if ((rc = injected(__func__, -1)) == NVML_SUCCESS && --g_ref == 0) free_config();
    UNLOCK();
    return rc;
}
EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    for (size_t i = 0; i < sizeof err_names / sizeof err_names[0]; i++)
        if (err_names[i].rc == result) return err_names[i].text;
    return "Unknown Error";
}
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) { SYS_BEGIN(); END(copy_str(version, length, g_driver)); }
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) { SYS_BEGIN(); END(copy_str(version, length, g_nvml_ver)); }
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { SYS_BEGIN(); if (!v) END(NVML_ERROR_INVALID_ARGUMENT); *v = g_cuda; END(NVML_SUCCESS); }
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { SYS_BEGIN(); if (!v) END(NVML_ERROR_INVALID_ARGUMENT); *v = g_cuda; END(NVML_SUCCESS); }

/* ================================================================ devices */
static nvmlReturn_t get_count(const char *fn, unsigned *c) {
    SYS_BEGIN_N(fn);
    if (!c) END(NVML_ERROR_INVALID_ARGUMENT);
    *c = g_ngpus; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *c) { return get_count(__func__, c); }
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *c) { return get_count(__func__, c); }

static nvmlReturn_t by_index(const char *fn, unsigned idx, nvmlDevice_t *d) {
    LOCK();
    nvmlReturn_t rc = NVML_SUCCESS;
    if (!g_ref) rc = NVML_ERROR_UNINITIALIZED;
    else if (!d || idx >= g_ngpus) rc = NVML_ERROR_INVALID_ARGUMENT;
    else if ((rc = injected(fn, (int)idx)) == NVML_SUCCESS) *d = &g_gpu_handles[idx];
    UNLOCK();
    return rc;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) { return by_index(__func__, i, d); }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) { return by_index(__func__, i, d); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) {
    SYS_BEGIN();
    if (!uuid || !d) END(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < g_ngpus; i++)
        if (!strcasecmp(uuid, g_gpus[i].uuid)) {
            if ((rc = injected(__func__, (int)i)) == NVML_SUCCESS) *d = &g_gpu_handles[i];
            END(rc);
        }
    if (!strncasecmp(uuid, "MIG-", 4)) {
        state_refresh();
        for (unsigned i = 0; i < g_ngpus; i++) {
            gpu_state *s = &g_state[i];
            for (unsigned j = 0; s->mig_cur && j < s->ngi; j++)
                for (unsigned k = 0; k < s->gi[j].nci; k++) {
                    char mu[96];
                    mig_uuid(&g_gpus[i], s->gi[j].id, s->gi[j].ci[k].id, mu, sizeof mu);
                    if (strcasecmp(mu, uuid)) continue;
                    sim_handle *h = pool_get(H_MIGDEV, (int)i, s->gi[j].id, s->gi[j].ci[k].id);
                    if (!h) END(NVML_ERROR_MEMORY);
                    *d = h; END(NVML_SUCCESS);
                }
        }
    }
    END(NVML_ERROR_NOT_FOUND);
}

static nvmlReturn_t by_bus(const char *fn, const char *bus, nvmlDevice_t *d) {
    SYS_BEGIN_N(fn);
    if (!bus || !d) END(NVML_ERROR_INVALID_ARGUMENT);
    unsigned dom = 0, b = 0, dev = 0, f = 0;
    if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &dev, &f) < 3) {
        dom = 0;
        if (sscanf(bus, "%x:%x.%x", &b, &dev, &f) < 2) END(NVML_ERROR_INVALID_ARGUMENT);
    }
    for (unsigned i = 0; i < g_ngpus; i++)
        if (g_gpus[i].domain == dom && g_gpus[i].bus == b && g_gpus[i].dev == dev) {
            if ((rc = injected(fn, (int)i)) == NVML_SUCCESS) *d = &g_gpu_handles[i];
            END(rc);
        }
    END(NVML_ERROR_NOT_FOUND);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *b, nvmlDevice_t *d) { return by_bus(__func__, b, d); }
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *b, nvmlDevice_t *d) { return by_bus(__func__, b, d); }

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEV_BEGIN(device, ALLOW_MIG);
    if (R.is_mig) { char buf[160]; mig_name(&R, buf, sizeof buf); END(copy_str(name, length, buf)); }
    END(copy_str(name, length, R.g->name));
}
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    DEV_BEGIN(device, ALLOW_MIG);
    if (R.is_mig) { char buf[96]; mig_uuid(R.g, R.gi->id, R.ci->id, buf, sizeof buf); END(copy_str(uuid, length, buf)); }
    END(copy_str(uuid, length, R.g->uuid));
}
EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    DEV_BEGIN(device, 0);
    if (!R.g->serial[0]) END(NVML_ERROR_NOT_SUPPORTED);
    END(copy_str(serial, length, R.g->serial));
}
EXPORT nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *pn, unsigned int length) {
    DEV_BEGIN(device, 0);
    if (!R.g->board_part[0]) END(NVML_ERROR_NOT_SUPPORTED);
    END(copy_str(pn, length, R.g->board_part));
}
EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *v, unsigned int length) {
    DEV_BEGIN(device, 0); END(copy_str(v, length, R.g->vbios));
}
#define UINT_GETTER(fname, flags, expr) \
    EXPORT nvmlReturn_t fname(nvmlDevice_t device, unsigned int *out) { \
        DEV_BEGIN(device, flags); if (!out) END(NVML_ERROR_INVALID_ARGUMENT); *out = (expr); END(NVML_SUCCESS); }
UINT_GETTER(nvmlDeviceGetIndex, 0, (unsigned)R.gpu)
UINT_GETTER(nvmlDeviceGetMinorNumber, 0, R.g->minor)
UINT_GETTER(nvmlDeviceGetPowerUsage, 0, R.g->power_mw)
UINT_GETTER(nvmlDeviceGetPowerManagementLimit, 0, R.g->power_limit_mw)
UINT_GETTER(nvmlDeviceGetPowerManagementDefaultLimit, 0, R.g->power_default_mw)
UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, 0, R.g->power_limit_mw)
UINT_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, 0, R.g->pcie_gen)
UINT_GETTER(nvmlDeviceGetCurrPcieLinkWidth, 0, R.g->pcie_width)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, 0, R.g->pcie_max_gen)
UINT_GETTER(nvmlDeviceGetMaxPcieLinkWidth, 0, R.g->pcie_max_width)

EXPORT nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *n) {
    DEV_BEGIN(device, 0);
    if (!n) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->num_cores) END(NVML_ERROR_NOT_SUPPORTED);
    *n = R.g->num_cores; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *n) {
    DEV_BEGIN(device, 0);
    if (!n) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->bus_width) END(NVML_ERROR_NOT_SUPPORTED);
    *n = R.g->bus_width; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *mn, unsigned int *mx) {
    DEV_BEGIN(device, 0);
    if (!mn || !mx) END(NVML_ERROR_INVALID_ARGUMENT);
    *mn = R.g->power_min_mw; *mx = R.g->power_max_mw; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *t) {
    DEV_BEGIN(device, ALLOW_MIG);
    if (!t) END(NVML_ERROR_INVALID_ARGUMENT);
    *t = (nvmlBrandType_t)R.g->brand; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *a) {
    DEV_BEGIN(device, ALLOW_MIG);
    if (!a) END(NVML_ERROR_INVALID_ARGUMENT);
    *a = R.g->arch; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    DEV_BEGIN(device, ALLOW_MIG);
    if (!major || !minor) END(NVML_ERROR_INVALID_ARGUMENT);
    *major = R.g->cc_major; *minor = R.g->cc_minor; END(NVML_SUCCESS);
}

static void fill_pci(const sim_gpu *g, nvmlPciInfo_t *p, int ver) {
    memset(p, 0, ver >= 2 ? sizeof *p : offsetof(nvmlPciInfo_t, busId));
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, g->domain, g->bus, g->dev);
    p->domain = g->domain; p->bus = g->bus; p->device = g->dev;
    p->pciDeviceId = g->pci_device_id; p->pciSubSystemId = g->pci_subsystem_id;
    if (ver >= 2) snprintf(p->busId, sizeof p->busId, NVML_DEVICE_PCI_BUS_ID_FMT, g->domain, g->bus, g->dev);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *p) {
    DEV_BEGIN(device, ALLOW_MIG); if (!p) END(NVML_ERROR_INVALID_ARGUMENT); fill_pci(R.g, p, 1); END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *p) {
    DEV_BEGIN(device, ALLOW_MIG); if (!p) END(NVML_ERROR_INVALID_ARGUMENT); fill_pci(R.g, p, 2); END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *p) {
    DEV_BEGIN(device, ALLOW_MIG); if (!p) END(NVML_ERROR_INVALID_ARGUMENT); fill_pci(R.g, p, 3); END(NVML_SUCCESS);
}

/* NVLink: a GPU of a fabric with NVSwitches has nvlink_count links (default 12, as on A100 HGX boards),
 * all active, link i leading to switch i % nswitches. GPUs outside a fabric answer NOT_SUPPORTED. */
static unsigned gpu_links(const sim_gpu *g) {
    if (g->nvlinks) return g->nvlinks;
    return g_nswitch ? 12U : 0U;
}
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive) {
    DEV_BEGIN(device, 0);
    if (!isActive) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!gpu_links(R.g)) END(NVML_ERROR_NOT_SUPPORTED);
    if (link >= gpu_links(R.g)) END(NVML_ERROR_INVALID_ARGUMENT);
    *isActive = (R.g->nvlink_inactive >> link) & 1ULL ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED; END(NVML_SUCCESS);
}
/* Error counters per link (the inventory's nvlink_errors; 0 otherwise); NOT_SUPPORTED without NVLink, as the state */
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, nvmlNvLinkErrorCounter_t counter,
                                                    unsigned long long *value) {
    DEV_BEGIN(device, 0);
    if (!value || (unsigned)counter >= NVML_NVLINK_ERROR_COUNT) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!gpu_links(R.g)) END(NVML_ERROR_NOT_SUPPORTED);
    if (link >= gpu_links(R.g)) END(NVML_ERROR_INVALID_ARGUMENT);
    *value = R.g->nvlink_err[link][counter]; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link, nvmlIntNvLinkDeviceType_t *t) {
    DEV_BEGIN(device, 0);
    if (!t) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!gpu_links(R.g)) END(NVML_ERROR_NOT_SUPPORTED);
    if (link >= gpu_links(R.g)) END(NVML_ERROR_INVALID_ARGUMENT);
    *t = g_nswitch ? NVML_NVLINK_DEVICE_TYPE_SWITCH : NVML_NVLINK_DEVICE_TYPE_GPU; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *p) {
    DEV_BEGIN(device, 0);
    if (!p) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!gpu_links(R.g) || !g_nswitch) END(NVML_ERROR_NOT_SUPPORTED);
    if (link >= gpu_links(R.g)) END(NVML_ERROR_INVALID_ARGUMENT);
    unsigned k = link % g_nswitch;
    memset(p, 0, sizeof *p);
    p->domain = g_switch_dom[k]; p->bus = g_switch_bus[k]; p->device = g_switch_dev[k];
    p->pciDeviceId = g_switch_devid[k];
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, p->domain, p->bus, p->device);
    snprintf(p->busId, sizeof p->busId, NVML_DEVICE_PCI_BUS_ID_FMT, p->domain, p->bus, p->device);
    END(NVML_SUCCESS);
}

/* PCIe topology between two GPUs, which go-gpuallocator's GetP2PLink asks for every pair when the device plugin answers
 * the kubelet's GetPreferredAllocation (found by a real kubelet: without it the plugin died with "undefined symbol:
 * nvmlDeviceGetTopologyCommonAncestor"). The simulator has no PCIe tree: the same GPU is INTERNAL, two GPUs are
 * SYSTEM (no PCIe switch or CPU shared), the farthest level, so NVLink alone orders a preferred allocation. */
EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                        nvmlGpuTopologyLevel_t *level) {
    DEV_BEGIN(device1, 0);
    if (!level || !device2) END(NVML_ERROR_INVALID_ARGUMENT);
    const sim_handle *other = NULL;
    if (device2 >= &g_gpu_handles[0] && device2 < &g_gpu_handles[g_ngpus]) other = device2;
    if (!other) END(NVML_ERROR_INVALID_ARGUMENT);
    *level = other->gpu == R.gpu ? NVML_TOPOLOGY_INTERNAL : NVML_TOPOLOGY_SYSTEM;
    END(NVML_SUCCESS);
}

static void mem_numbers(const devref *R, unsigned long long *total, unsigned long long *reserved, unsigned long long *used) {
    if (R->is_mig) {
        *total = (R->gp ? R->gp->mem_mb : 0) * MIB;
        *reserved = 0; *used = 0;
    } else { *total = R->g->mem_total; *reserved = R->g->mem_reserved; *used = R->g->mem_used; }
    if (*reserved + *used > *total) *used = *total - *reserved;
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *m) {
    DEV_BEGIN(device, ALLOW_MIG);
    if (!m) END(NVML_ERROR_INVALID_ARGUMENT);
    unsigned long long t, r, u;
    mem_numbers(&R, &t, &r, &u);
    m->total = t; m->used = r + u; m->free = t - r - u;
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *m) {
    DEV_BEGIN(device, ALLOW_MIG);
    if (!m) END(NVML_ERROR_INVALID_ARGUMENT);
    if (m->version != nvmlMemory_v2) END(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    unsigned long long t, r, u;
    mem_numbers(&R, &t, &r, &u);
    m->total = t; m->reserved = r; m->used = u; m->free = t - r - u;
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *b) {
    DEV_BEGIN(device, 0);
    if (!b) END(NVML_ERROR_INVALID_ARGUMENT);
    b->bar1Total = R.g->bar1_total; b->bar1Used = R.g->bar1_used; b->bar1Free = R.g->bar1_total - R.g->bar1_used;
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t s, unsigned int *t) {
    DEV_BEGIN(device, 0);
    if (!t || s != NVML_TEMPERATURE_GPU) END(NVML_ERROR_INVALID_ARGUMENT);
    *t = R.g->temp; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *t) {
    DEV_BEGIN(device, 0);
    if (!t) END(NVML_ERROR_INVALID_ARGUMENT);
    if (t->version != nvmlTemperature_v1) END(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if (t->sensorType != NVML_TEMPERATURE_GPU) END(NVML_ERROR_INVALID_ARGUMENT);
    t->temperature = (int)R.g->temp; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    DEV_BEGIN(device, 0);
    if (!u) END(NVML_ERROR_INVALID_ARGUMENT);
    u->gpu = R.g->util_gpu; u->memory = R.g->util_mem; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *p) {
    DEV_BEGIN(device, 0);
    if (!p) END(NVML_ERROR_INVALID_ARGUMENT);
    *p = (nvmlPstates_t)R.g->pstate; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *c) {
    DEV_BEGIN(device, 0);
    if (!c || (unsigned)type >= NVML_CLOCK_COUNT) END(NVML_ERROR_INVALID_ARGUMENT);
    *c = R.g->clocks[type]; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *c) {
    DEV_BEGIN(device, 0);
    if (!c || (unsigned)type >= NVML_CLOCK_COUNT) END(NVML_ERROR_INVALID_ARGUMENT);
    *c = R.g->max_clocks[type]; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *cur, nvmlEnableState_t *pend) {
    DEV_BEGIN(device, 0);
    if (!cur || !pend) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->ecc_supported) END(NVML_ERROR_NOT_SUPPORTED);
    *cur = (nvmlEnableState_t)R.g->ecc_cur; *pend = (nvmlEnableState_t)R.g->ecc_pend; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *m) {
    DEV_BEGIN(device, 0);
    if (!m) END(NVML_ERROR_INVALID_ARGUMENT);
    *m = (nvmlEnableState_t)R.g->display_mode; END(NVML_SUCCESS);
}
/* -1: the call answers NOT_SUPPORTED (no fabric_state key and no NVSwitch fabric: pre-Hopper GPUs, the default); an
 * explicit fabric_state (not_supported included) is answered with SUCCESS and that state, as the real PCIe-attached
 * H100 and H200 on driver 580 answered nvmlDeviceGetGpuFabricInfoV v3: state NOT_SUPPORTED, status SUCCESS */
static int fabric_state(const sim_gpu *g) {
    if (g->fabric_state != -2) return g->fabric_state;
    return (gpu_links(g) && g_nswitch && g->arch >= NVML_DEVICE_ARCH_HOPPER && g->arch != NVML_DEVICE_ARCH_UNKNOWN)
        ? NVML_GPU_FABRIC_STATE_COMPLETED : -1;
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *f) {
    DEV_BEGIN(device, 0);
    if (!f) END(NVML_ERROR_INVALID_ARGUMENT);
    int st = fabric_state(R.g);
    if (st < 0) END(NVML_ERROR_NOT_SUPPORTED);
    memset(f, 0, sizeof *f);
    f->state = (nvmlGpuFabricState_t)st; f->status = R.g->fabric_status;
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *f) {
    DEV_BEGIN(device, 0);
    if (!f) END(NVML_ERROR_INVALID_ARGUMENT);
    if (f->version != nvmlGpuFabricInfo_v2 && f->version != nvmlGpuFabricInfo_v3) END(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    int st = fabric_state(R.g);
    if (st < 0) END(NVML_ERROR_NOT_SUPPORTED);
    nvmlGpuFabricInfo_v2_t *v2 = (nvmlGpuFabricInfo_v2_t *)f;
    unsigned version = f->version;
    memset(f, 0, version == nvmlGpuFabricInfo_v3 ? sizeof(nvmlGpuFabricInfo_v3_t) : sizeof(nvmlGpuFabricInfo_v2_t));
    v2->version = version;
    v2->state = (nvmlGpuFabricState_t)st; v2->status = R.g->fabric_status; v2->healthMask = R.g->fabric_health_mask;
    if (version == nvmlGpuFabricInfo_v3)
        f->healthSummary = st == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED ? NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED
            : st == NVML_GPU_FABRIC_STATE_COMPLETED && R.g->fabric_status == NVML_SUCCESS
            ? NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY : NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY;
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *m) {
    DEV_BEGIN(device, 0);
    if (!m) END(NVML_ERROR_INVALID_ARGUMENT);
    *m = (nvmlEnableState_t)R.g->display_active; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *m) {
    DEV_BEGIN(device, 0);
    if (!m) END(NVML_ERROR_INVALID_ARGUMENT);
    *m = (nvmlGpuVirtualizationMode_t)R.g->virt_mode; END(NVML_SUCCESS);
}
/* ----- health (read-only) */
EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corr, unsigned int *unc, unsigned int *pending, unsigned int *failure) {
    DEV_BEGIN(device, 0);
    if (!corr || !unc || !pending || !failure) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->rr_supported) END(NVML_ERROR_NOT_SUPPORTED);
    /* a reset applies a pending remapping (it is no longer pending) */
    *corr = R.g->rr_corr; *unc = R.g->rr_unc; *pending = R.s->resets ? 0 : R.g->rr_pending; *failure = R.g->rr_failure;
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *v) {
    DEV_BEGIN(device, 0);
    if (!v) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->rr_hist_supported) END(NVML_ERROR_NOT_SUPPORTED);
    v->max = R.g->rr_hist[0]; v->high = R.g->rr_hist[1]; v->partial = R.g->rr_hist[2]; v->low = R.g->rr_hist[3]; v->none = R.g->rr_hist[4];
    END(NVML_SUCCESS);
}
/* without retired_pages (H100, H200: they remap rows instead): single-bit NOT_SUPPORTED, double-bit
 * retired_pages_double_bit_error (INVALID_ARGUMENT as the H100 answered, NOT_SUPPORTED as the H200), pending
 * NOT_SUPPORTED, as the 580 driver answered. Pages are reported as count only (addresses 0). */
static nvmlReturn_t retired_pages(devref *R, nvmlPageRetirementCause_t cause, unsigned int *count, unsigned long long *addr, unsigned long long *ts) {
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!R->g->rp_supported) return cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? R->g->rp_dbe_unsupported : NVML_ERROR_NOT_SUPPORTED;
    if ((unsigned)cause >= NVML_PAGE_RETIREMENT_CAUSE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? R->g->rp_dbe : R->g->rp_sbe;
    if (*count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (unsigned i = 0; i < n; i++) { if (addr) addr[i] = 0x1000ULL * (i + 1); if (ts) ts[i] = 0; }
    *count = n; return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *count, unsigned long long *addr) {
    DEV_BEGIN(device, 0); END(retired_pages(&R, cause, count, addr, NULL));
}
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *count, unsigned long long *addr, unsigned long long *ts) {
    DEV_BEGIN(device, 0); END(retired_pages(&R, cause, count, addr, ts));
}
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *p) {
    DEV_BEGIN(device, 0);
    if (!p) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->rp_supported) END(NVML_ERROR_NOT_SUPPORTED);
    *p = R.g->rp_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t t, nvmlEccCounterType_t c, unsigned long long *n) {
    DEV_BEGIN(device, 0);
    if (!n || (unsigned)t >= NVML_MEMORY_ERROR_TYPE_COUNT || (unsigned)c >= NVML_ECC_COUNTER_TYPE_COUNT) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->ecc_supported) END(NVML_ERROR_NOT_SUPPORTED);
    /* volatile counts start again at a reset (the aggregate ones stay) */
    *n = (c == NVML_VOLATILE_ECC && R.s->resets) ? 0 : R.g->ecc_counts[t][c]; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *r) {
    DEV_BEGIN(device, 0); if (!r) END(NVML_ERROR_INVALID_ARGUMENT); *r = R.g->clk_reasons; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *r) {
    DEV_BEGIN(device, 0); if (!r) END(NVML_ERROR_INVALID_ARGUMENT); *r = R.g->clk_reasons; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *r) {
    DEV_BEGIN(device, 0); if (!r) END(NVML_ERROR_INVALID_ARGUMENT); *r = R.g->clk_reasons_supported; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device, unsigned long long *r) {
    DEV_BEGIN(device, 0); if (!r) END(NVML_ERROR_INVALID_ARGUMENT); *r = R.g->clk_reasons_supported; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t t, unsigned int *v) {
    DEV_BEGIN(device, 0);
    if (!v) END(NVML_ERROR_INVALID_ARGUMENT);
    int x = t == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN ? R.g->temp_slowdown : t == NVML_TEMPERATURE_THRESHOLD_SHUTDOWN ? R.g->temp_shutdown : -1;
    if (x < 0) END(NVML_ERROR_NOT_SUPPORTED);
    *v = (unsigned)x; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *v, unsigned int len) {
    DEV_BEGIN(device, 0); if (!R.g->inforom[0]) END(NVML_ERROR_NOT_SUPPORTED); END(copy_str(v, len, R.g->inforom));
}
EXPORT nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device) {
    DEV_BEGIN(device, 0);
    if (R.g->inforom_valid < 0) END(NVML_ERROR_NOT_SUPPORTED);
    END(R.g->inforom_valid ? NVML_SUCCESS : NVML_ERROR_CORRUPTED_INFOROM);
}
EXPORT nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t device, char *v) {
    DEV_BEGIN(device, 0); if (!R.g->gsp_fw[0]) END(NVML_ERROR_NOT_SUPPORTED); END(copy_str(v, NVML_GSP_FIRMWARE_VERSION_BUF_SIZE, R.g->gsp_fw));
}
EXPORT nvmlReturn_t nvmlDeviceGetGspFirmwareMode(nvmlDevice_t device, unsigned int *en, unsigned int *dflt) {
    DEV_BEGIN(device, 0);
    if (!en || !dflt) END(NVML_ERROR_INVALID_ARGUMENT);
    if (R.g->gsp_mode[0] < 0) END(NVML_ERROR_NOT_SUPPORTED);
    *en = (unsigned)R.g->gsp_mode[0]; *dflt = (unsigned)R.g->gsp_mode[1]; END(NVML_SUCCESS);
}
UINT_GETTER(nvmlDeviceGetGpuMaxPcieLinkGeneration, 0, R.g->pcie_gpu_max_gen)
UINT_GETTER(nvmlDeviceGetPcieReplayCounter, 0, R.g->pcie_replay)
/* Field values: only NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230) is answered (unsigned int, the inventory's
 * recovery_action; default NONE on a 570+ driver, as the real H100 on 580 answered "GPU Recovery Action: None" in
 * nvidia-smi -q, NOT_SUPPORTED before 570, where the field does not exist); every other field's value carries
 * NOT_SUPPORTED while the call itself succeeds. */
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values) {
    DEV_BEGIN(device, 0);
    if (valuesCount < 0 || (valuesCount > 0 && !values)) END(NVML_ERROR_INVALID_ARGUMENT);
    int action = R.g->recovery_action;
    /* a reset satisfies GPU_RESET and DRAIN_AND_RESET; the others (reboots, IMEX, bus reset) need more than a reset */
    if (R.s->resets && (action == NVML_GPU_RECOVERY_ACTION_GPU_RESET || action == NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET))
        action = NVML_GPU_RECOVERY_ACTION_NONE;
    if (action == -2) action = atoi(g_driver) >= 570 ? NVML_GPU_RECOVERY_ACTION_NONE : -1;
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = 0; v->latencyUsec = 0;
        if (v->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION && action >= 0) {
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT; v->value.uiVal = (unsigned)action; v->nvmlReturn = NVML_SUCCESS;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *t) {
    DEV_BEGIN(device, 0); if (!t) END(NVML_ERROR_INVALID_ARGUMENT); *t = R.g->event_types; END(NVML_SUCCESS);
}

/* Event sets: the inventory's xid_events are Xids that happen while a client waits; each set delivers each GPU's
 * list once, in order. With nothing left the wait answers TIMEOUT after timeoutms, as the real one does (an H100 with
 * driver 580: TIMEOUT after 200 ms, docs/conformance/doctor-health.md DH-06), sleeping without the lock: the health
 * loops of NVIDIA's device plugin v0.19.1 (internal/rm/health.go) and DRA plugin v0.5.0 (device_health.go) call
 * Wait(5000) again at once on TIMEOUT, so an answer at once made each of them spin a CPU for as long as it ran. The
 * happened before any reset of their GPU: a set that registers the GPU after a reset (state resets > 0) gets none of
 * them - NVML delivers events that happen after the registration only, so a device plugin restarted after the
 * repair does not see the old Xid again. With xid_events_after_ms a GPU's Xids happen that long after the set
 * registered it (a GPU that fails while its client runs); a wait returns when one happens, as the real one does. */
#define EVSET_MAGIC 0x45565354U
struct nvmlEventSet_st { unsigned magic; unsigned long long types[SIM_MAX_GPUS]; unsigned delivered[SIM_MAX_GPUS];
                         long long registered_ms[SIM_MAX_GPUS]; };
static long long mono_ms(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}
EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    SYS_BEGIN();
    if (!set) END(NVML_ERROR_INVALID_ARGUMENT);
    struct nvmlEventSet_st *es = calloc(1, sizeof *es);
    if (!es) END(NVML_ERROR_MEMORY);
    es->magic = EVSET_MAGIC; *set = es; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    DEV_BEGIN(device, 0);
    if (!set || set->magic != EVSET_MAGIC) END(NVML_ERROR_INVALID_ARGUMENT);
    if (types & ~R.g->event_types) END(NVML_ERROR_NOT_SUPPORTED);
    if (!set->types[R.gpu]) set->registered_ms[R.gpu] = mono_ms();
    set->types[R.gpu] |= types;
    if (R.s->resets) set->delivered[R.gpu] = R.g->nxid;      /* the Xids were before the reset */
    END(NVML_SUCCESS);
}
static nvmlReturn_t event_wait(const char *fn, nvmlEventSet_t set, nvmlEventData_t *data, unsigned int ms) {
    long long deadline = mono_ms() + ms;
    for (;;) {
        SYS_BEGIN_N(fn);
        if (!set || set->magic != EVSET_MAGIC || !data) END(NVML_ERROR_INVALID_ARGUMENT);
        long long now = mono_ms(), next = deadline;      /* the wait ends at its timeout or at the next Xid */
        for (unsigned i = 0; i < g_ngpus; i++) {
            if (!(set->types[i] & nvmlEventTypeXidCriticalError) || set->delivered[i] >= g_gpus[i].nxid) continue;
            long long at = set->registered_ms[i] + g_gpus[i].xid_after_ms;
            if (at > now) { if (at < next) next = at; continue; }
            memset(data, 0, sizeof *data);
            data->device = &g_gpu_handles[i]; data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = g_gpus[i].xid[set->delivered[i]++];
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFU;
            END(NVML_SUCCESS);
        }
        UNLOCK();
        long long wait = next - now;
        if (wait > 0) {
            struct timespec left = { (time_t)(wait / 1000), (long)(wait % 1000) * 1000000L };
            while (nanosleep(&left, &left) != 0 && errno == EINTR) {}
        }
        if (next >= deadline) return NVML_ERROR_TIMEOUT;
    }
}
EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int ms) { return event_wait(__func__, set, data, ms); }
EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int ms) { return event_wait(__func__, set, data, ms); }
EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    SYS_BEGIN();
    if (!set || set->magic != EVSET_MAGIC) END(NVML_ERROR_INVALID_ARGUMENT);
    set->magic = 0; free(set); END(NVML_SUCCESS);
}

static nvmlReturn_t no_procs(const char *fn, nvmlDevice_t device, unsigned int *count) {
    DEV_BEGIN_N(fn, device, ALLOW_MIG);
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    *count = 0; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i) { (void)i; return no_procs(__func__, d, c); }
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_v2_t *i) { (void)i; return no_procs(__func__, d, c); }
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c, nvmlProcessInfo_t *i) { (void)i; return no_procs(__func__, d, c); }

/* ----- persistence / compute mode (state file) */
EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *m) {
    DEV_BEGIN(device, 0);
    if (!m) END(NVML_ERROR_INVALID_ARGUMENT);
    *m = (nvmlEnableState_t)R.s->persistence; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode) {
    DEV_BEGIN(device, 0);
    if (mode != NVML_FEATURE_DISABLED && mode != NVML_FEATURE_ENABLED) END(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = state_begin_write()) != NVML_SUCCESS) { state_abort(); END(rc); }
    R.s->persistence = (unsigned)mode;
    END(state_commit());
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *m) {
    DEV_BEGIN(device, 0);
    if (!m) END(NVML_ERROR_INVALID_ARGUMENT);
    *m = (nvmlComputeMode_t)R.s->compute_mode; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode) {
    DEV_BEGIN(device, 0);
    if ((unsigned)mode >= NVML_COMPUTEMODE_COUNT) END(NVML_ERROR_INVALID_ARGUMENT);
    if (mode == NVML_COMPUTEMODE_EXCLUSIVE_THREAD) END(NVML_ERROR_NOT_SUPPORTED);   /* removed since CUDA 8 */
    if ((rc = state_begin_write()) != NVML_SUCCESS) { state_abort(); END(rc); }
    R.s->compute_mode = (unsigned)mode;
    END(state_commit());
}

/* ================================================================== MIG */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *cur, unsigned int *pend) {
    DEV_BEGIN(device, 0);
    if (!cur || !pend) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->mig_capable) END(NVML_ERROR_NOT_SUPPORTED);
    *cur = R.s->mig_cur; *pend = R.s->mig_pend; END(NVML_SUCCESS);
}
static void apply_reset(gpu_state *s) {
    if (s->mig_cur != s->mig_pend) { s->mig_cur = s->mig_pend; s->ngi = 0; }
}
/* What nvidia-smi -r answers for one GPU (NVML has no public reset call): NOT_SUPPORTED where the inventory says the GPU
 * cannot be reset (reset_supported false: a GPU passed through to a VM whose hypervisor does not allow it), IN_USE for
 * the first reset_in_use attempts (a client such as nvidia-persistenced or Fabric Manager still holds it), GPU_IS_LOST
 * for a GPU fallen off the bus; else the reset: a pending MIG mode becomes current, the volatile ECC counts, a pending
 * row remapping and a recovery action a reset satisfies are cleared. */
static nvmlReturn_t reset_one(unsigned i) {
    const sim_gpu *g = &g_gpus[i];
    gpu_state *s = &g_state[i];
    if (injected("nvmlSimResetGpu", (int)i) != NVML_SUCCESS) return injected("nvmlSimResetGpu", (int)i);
    if (!g->reset_supported) return NVML_ERROR_NOT_SUPPORTED;
    if (s->reset_tries < g->reset_in_use) { s->reset_tries++; return NVML_ERROR_IN_USE; }
    apply_reset(s);
    s->resets++;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activation) {
    DEV_BEGIN(device, 0);
    if (!activation || (mode != NVML_DEVICE_MIG_DISABLE && mode != NVML_DEVICE_MIG_ENABLE)) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->mig_capable) END(NVML_ERROR_NOT_SUPPORTED);
    if ((rc = state_begin_write()) != NVML_SUCCESS) { state_abort(); END(rc); }
    if (mode == NVML_DEVICE_MIG_DISABLE && R.s->mig_cur && R.s->ngi) { state_abort(); END(NVML_ERROR_IN_USE); }
    R.s->mig_pend = mode;
    int apply = R.g->mig_apply >= 0 ? R.g->mig_apply : g_mig_apply;
    if (R.s->mig_cur == mode) *activation = NVML_SUCCESS;
    else if (apply) { apply_reset(R.s); *activation = NVML_SUCCESS; }
    else *activation = NVML_ERROR_IN_USE;      /* GPU busy: change stays pending until a GPU reset */
    END(state_commit());
}

static nvmlReturn_t mig_dev_check(devref *R) {
    if (!R->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (!R->s->mig_cur) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}
/* profile info: 580 drivers answer it with MIG disabled (real H100 capture, docs/conformance/doctor-health.md) */
static nvmlReturn_t mig_info_check(devref *R) {
    if (!R->g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    if (!R->s->mig_cur && !R->g->profile_info_without_mig) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}
static void fill_gi_profile_common(const sim_gi_profile *p, const sim_mig_table *t, unsigned *id, unsigned *slices, unsigned *inst,
                                   unsigned *sms, unsigned *ce, unsigned *dec, unsigned *enc, unsigned *jpg, unsigned *ofa, unsigned long long *mem) {
    (void)t;
    *id = p->id; *slices = p->slices; *inst = p->instances; *sms = p->sms; *ce = p->ce; *dec = p->dec; *enc = p->enc;
    *jpg = p->jpg; *ofa = p->ofa; *mem = p->mem_mb;
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info) {
    DEV_BEGIN(device, 0);
    if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) END(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = mig_info_check(&R)) != NVML_SUCCESS) END(rc);
    const sim_gi_profile *p = gi_profile_by_index(R.g->table, profile);
    if (!p) END(NVML_ERROR_NOT_SUPPORTED);
    memset(info, 0, sizeof *info);
    fill_gi_profile_common(p, R.g->table, &info->id, &info->sliceCount, &info->instanceCount, &info->multiprocessorCount,
                           &info->copyEngineCount, &info->decoderCount, &info->encoderCount, &info->jpegCount, &info->ofaCount, &info->memorySizeMB);
    END(NVML_SUCCESS);
}
static nvmlReturn_t fill_gi_profile_v(const sim_gi_profile *p, const sim_mig_table *t, nvmlGpuInstanceProfileInfo_v2_t *info) {
    unsigned ver = info->version;
    if (ver == nvmlGpuInstanceProfileInfo_v2) {
        /* the real 580 driver hands the v2 structure back with version 0 (H200: nvml-raw.json) */
        memset(info, 0, sizeof *info);
        fill_gi_profile_common(p, t, &info->id, &info->sliceCount, &info->instanceCount, &info->multiprocessorCount,
                               &info->copyEngineCount, &info->decoderCount, &info->encoderCount, &info->jpegCount, &info->ofaCount, &info->memorySizeMB);
        snprintf(info->name, sizeof info->name, "MIG %s", p->name);
    } else if (ver == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)info;
        memset(v3, 0, sizeof *v3); v3->version = ver;
        fill_gi_profile_common(p, t, &v3->id, &v3->sliceCount, &v3->instanceCount, &v3->multiprocessorCount,
                               &v3->copyEngineCount, &v3->decoderCount, &v3->encoderCount, &v3->jpegCount, &v3->ofaCount, &v3->memorySizeMB);
        snprintf(v3->name, sizeof v3->name, "MIG %s", p->name);
    } else return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *info) {
    DEV_BEGIN(device, 0);
    if (!info || profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) END(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = mig_info_check(&R)) != NVML_SUCCESS) END(rc);
    const sim_gi_profile *p = gi_profile_by_index(R.g->table, profile);
    if (!p) END(NVML_ERROR_NOT_SUPPORTED);
    END(fill_gi_profile_v(p, R.g->table, info));
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstanceProfileInfo_v2_t *info) {
    DEV_BEGIN(device, 0);
    if (!info) END(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = mig_info_check(&R)) != NVML_SUCCESS) END(rc);
    const sim_gi_profile *p = gi_profile_by_id(R.g->table, profileId);
    if (!p) END(NVML_ERROR_INVALID_ARGUMENT);
    END(fill_gi_profile_v(p, R.g->table, info));
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                                 nvmlGpuInstancePlacement_t *pl, unsigned int *count) {
    DEV_BEGIN(device, 0);
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->mig_capable) END(NVML_ERROR_NOT_SUPPORTED);
    const sim_gi_profile *p = gi_profile_by_id(R.g->table, profileId);
    if (!p) END(NVML_ERROR_INVALID_ARGUMENT);
    if (pl) {
        if (*count < p->nstarts) { *count = p->nstarts; END(NVML_ERROR_INSUFFICIENT_SIZE); }
        for (unsigned k = 0; k < p->nstarts; k++) { pl[k].start = p->starts[k]; pl[k].size = p->psize; }
    }
    *count = p->nstarts;
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId, unsigned int *count) {
    DEV_BEGIN(device, 0);
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = mig_dev_check(&R)) != NVML_SUCCESS) END(rc);
    const sim_gi_profile *p = gi_profile_by_id(R.g->table, profileId);
    if (!p) END(NVML_ERROR_INVALID_ARGUMENT);
    *count = gi_remaining(p, R.s);
    END(NVML_SUCCESS);
}
static nvmlReturn_t create_gi(const char *fn, nvmlDevice_t device, unsigned profileId, int start, nvmlGpuInstance_t *out) {
    DEV_BEGIN_N(fn, device, 0);
    if (!out) END(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = mig_dev_check(&R)) != NVML_SUCCESS) END(rc);
    const sim_gi_profile *p = gi_profile_by_id(R.g->table, profileId);
    if (!p) END(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = state_begin_write()) != NVML_SUCCESS) { state_abort(); END(rc); }
    if (!R.s->mig_cur) { state_abort(); END(NVML_ERROR_NOT_SUPPORTED); }
    gi_state *g;
    if ((rc = gi_create(R.g->table, R.s, p, start, &g)) != NVML_SUCCESS) { state_abort(); END(rc); }
    sim_handle *h = pool_get(H_GI, R.gpu, g->id, 0);
    if (!h) { state_abort(); END(NVML_ERROR_MEMORY); }
    if ((rc = state_commit()) == NVML_SUCCESS) *out = (nvmlGpuInstance_t)h;
    END(rc);
}
EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gi) {
    return create_gi(__func__, device, profileId, -1, gi);
}
EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                            const nvmlGpuInstancePlacement_t *placement, nvmlGpuInstance_t *gi) {
    if (!placement) return NVML_ERROR_INVALID_ARGUMENT;
    LOCK();
    const sim_gi_profile *p = NULL;
    if (g_ref && device >= &g_gpu_handles[0] && device < &g_gpu_handles[g_ngpus])
        p = gi_profile_by_id(g_gpus[device->gpu].table, profileId);
    UNLOCK();
    if (p && placement->size != p->psize) return g_ref ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    return create_gi(__func__, device, profileId, (int)placement->start, gi);
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gis, unsigned int *count) {
    DEV_BEGIN(device, 0);
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = mig_dev_check(&R)) != NVML_SUCCESS) END(rc);
    const sim_gi_profile *p = gi_profile_by_id(R.g->table, profileId);
    if (!p) END(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = 0;
    for (unsigned i = 0; i < R.s->ngi; i++) {
        if (R.s->gi[i].profile_id != profileId) continue;
        if (gis) {
            sim_handle *h = pool_get(H_GI, R.gpu, R.s->gi[i].id, 0);
            if (!h) END(NVML_ERROR_MEMORY);
            gis[n] = (nvmlGpuInstance_t)h;
        }
        n++;
    }
    *count = n;
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gi) {
    DEV_BEGIN(device, 0);
    if (!gi) END(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = mig_dev_check(&R)) != NVML_SUCCESS) END(rc);
    if (!find_gi(R.s, id)) END(NVML_ERROR_NOT_FOUND);
    sim_handle *h = pool_get(H_GI, R.gpu, id, 0);
    if (!h) END(NVML_ERROR_MEMORY);
    *gi = (nvmlGpuInstance_t)h; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
    GI_BEGIN(gpuInstance);
    if (!info) END(NVML_ERROR_INVALID_ARGUMENT);
    info->device = &g_gpu_handles[R.gpu]; info->id = R.gi->id; info->profileId = R.gi->profile_id;
    info->placement.start = R.gi->start; info->placement.size = R.gi->size;
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
    GI_BEGIN(gpuInstance);
    unsigned id = R.gi->id;
    if ((rc = state_begin_write()) != NVML_SUCCESS) { state_abort(); END(rc); }
    if ((rc = reresolve(&R, id, -1)) != NVML_SUCCESS) { state_abort(); END(rc); }
    if (R.gi->nci) { state_abort(); END(NVML_ERROR_IN_USE); }
    unsigned pos = (unsigned)(R.gi - R.s->gi);
    memmove(&R.s->gi[pos], &R.s->gi[pos + 1], (R.s->ngi - pos - 1) * sizeof R.s->gi[0]);
    R.s->ngi--;
    END(state_commit());
}

/* ----- compute instances */
static nvmlReturn_t ci_prof_lookup(const devref *R, unsigned profile, unsigned eng, ci_profile *cp) {
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || eng >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
    return ci_profile_get(R->gp, profile, cp) ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                                unsigned int engProfile, nvmlComputeInstanceProfileInfo_t *info) {
    GI_BEGIN(gpuInstance);
    ci_profile cp;
    if (!info) END(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = ci_prof_lookup(&R, profile, engProfile, &cp)) != NVML_SUCCESS) END(rc);
    memset(info, 0, sizeof *info);
    info->id = cp.id; info->sliceCount = cp.slices; info->instanceCount = cp.instances; info->multiprocessorCount = cp.sms;
    info->sharedCopyEngineCount = R.gp->ce; info->sharedDecoderCount = R.gp->dec; info->sharedEncoderCount = R.gp->enc;
    info->sharedJpegCount = R.gp->jpg; info->sharedOfaCount = R.gp->ofa;
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                                 unsigned int engProfile, nvmlComputeInstanceProfileInfo_v2_t *info) {
    GI_BEGIN(gpuInstance);
    ci_profile cp;
    if (!info) END(NVML_ERROR_INVALID_ARGUMENT);
    if (info->version != nvmlComputeInstanceProfileInfo_v2 && info->version != nvmlComputeInstanceProfileInfo_v3)
        END(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    if ((rc = ci_prof_lookup(&R, profile, engProfile, &cp)) != NVML_SUCCESS) END(rc);
    unsigned ver = info->version;
    size_t sz = ver == nvmlComputeInstanceProfileInfo_v3 ? sizeof(nvmlComputeInstanceProfileInfo_v3_t) : sizeof *info;
    memset(info, 0, sz);
    info->version = ver;   /* v2 and v3 share the layout up to name; v3 appends capabilities */
    info->id = cp.id; info->sliceCount = cp.slices; info->instanceCount = cp.instances; info->multiprocessorCount = cp.sms;
    info->sharedCopyEngineCount = R.gp->ce; info->sharedDecoderCount = R.gp->dec; info->sharedEncoderCount = R.gp->enc;
    info->sharedJpegCount = R.gp->jpg; info->sharedOfaCount = R.gp->ofa;
    snprintf(info->name, sizeof info->name, "MIG %s", cp.name);
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance, unsigned int profileId, unsigned int *count) {
    GI_BEGIN(gpuInstance);
    ci_profile cp;
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    if (profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || ci_profile_get(R.gp, profileId, &cp)) END(NVML_ERROR_INVALID_ARGUMENT);
    *count = ci_remaining(&cp, R.gi);
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                                       nvmlComputeInstancePlacement_t *pl, unsigned int *count) {
    GI_BEGIN(gpuInstance);
    ci_profile cp;
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    if (profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || ci_profile_get(R.gp, profileId, &cp)) END(NVML_ERROR_INVALID_ARGUMENT);
    if (pl) {
        if (*count < cp.nstarts) { *count = cp.nstarts; END(NVML_ERROR_INSUFFICIENT_SIZE); }
        for (unsigned k = 0; k < cp.nstarts; k++) { pl[k].start = cp.starts[k]; pl[k].size = cp.slices; }
    }
    *count = cp.nstarts;
    END(NVML_SUCCESS);
}
static nvmlReturn_t create_ci(nvmlGpuInstance_t gpuInstance, unsigned profileId, int start, unsigned size, nvmlComputeInstance_t *out) {
    devref R; nvmlReturn_t rc; LOCK();
    if ((rc = gi_enter(start < 0 ? "nvmlGpuInstanceCreateComputeInstance" : "nvmlGpuInstanceCreateComputeInstanceWithPlacement",
                       gpuInstance, &R)) != NVML_SUCCESS) END(rc);
    ci_profile cp;
    if (!out) END(NVML_ERROR_INVALID_ARGUMENT);
    if (profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || ci_profile_get(R.gp, profileId, &cp)) END(NVML_ERROR_INVALID_ARGUMENT);
    if (start >= 0 && size != cp.slices) END(NVML_ERROR_INVALID_ARGUMENT);
    unsigned gid = R.gi->id;
    if ((rc = state_begin_write()) != NVML_SUCCESS) { state_abort(); END(rc); }
    if ((rc = reresolve(&R, gid, -1)) != NVML_SUCCESS) { state_abort(); END(rc); }
    ci_state *c;
    if ((rc = ci_create(R.gi, &cp, start, &c)) != NVML_SUCCESS) { state_abort(); END(rc); }
    sim_handle *h = pool_get(H_CI, R.gpu, gid, c->id);
    if (!h) { state_abort(); END(NVML_ERROR_MEMORY); }
    if ((rc = state_commit()) == NVML_SUCCESS) *out = (nvmlComputeInstance_t)h;
    END(rc);
}
EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gi, unsigned int profileId, nvmlComputeInstance_t *ci) {
    return create_ci(gi, profileId, -1, 0, ci);
}
EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gi, unsigned int profileId,
                                                                     const nvmlComputeInstancePlacement_t *pl, nvmlComputeInstance_t *ci) {
    if (!pl) return NVML_ERROR_INVALID_ARGUMENT;
    return create_ci(gi, profileId, (int)pl->start, pl->size, ci);
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                      nvmlComputeInstance_t *cis, unsigned int *count) {
    GI_BEGIN(gpuInstance);
    ci_profile cp;
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    if (profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || ci_profile_get(R.gp, profileId, &cp)) END(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = 0;
    for (unsigned i = 0; i < R.gi->nci; i++) {
        if (R.gi->ci[i].profile_id != profileId) continue;
        if (cis) {
            sim_handle *h = pool_get(H_CI, R.gpu, R.gi->id, R.gi->ci[i].id);
            if (!h) END(NVML_ERROR_MEMORY);
            cis[n] = (nvmlComputeInstance_t)h;
        }
        n++;
    }
    *count = n;
    END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id, nvmlComputeInstance_t *ci) {
    GI_BEGIN(gpuInstance);
    if (!ci) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!find_ci(R.gi, id)) END(NVML_ERROR_NOT_FOUND);
    sim_handle *h = pool_get(H_CI, R.gpu, R.gi->id, id);
    if (!h) END(NVML_ERROR_MEMORY);
    *ci = (nvmlComputeInstance_t)h; END(NVML_SUCCESS);
}
static nvmlReturn_t ci_info(const char *fn, nvmlComputeInstance_t c, nvmlComputeInstanceInfo_t *info, int with_placement) {
    CI_BEGIN_N(fn, c);
    if (!info) END(NVML_ERROR_INVALID_ARGUMENT);
    info->device = &g_gpu_handles[R.gpu];
    info->gpuInstance = (nvmlGpuInstance_t)pool_get(H_GI, R.gpu, R.gi->id, 0);
    info->id = R.ci->id; info->profileId = R.ci->profile_id;
    if (with_placement) { info->placement.start = R.ci->start; info->placement.size = R.ci->size; }
    END(info->gpuInstance ? NVML_SUCCESS : NVML_ERROR_MEMORY);
}
EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t c, nvmlComputeInstanceInfo_t *info) { return ci_info(__func__, c, info, 0); }
EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t c, nvmlComputeInstanceInfo_t *info) { return ci_info(__func__, c, info, 1); }
EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t c) {
    CI_BEGIN(c);
    unsigned gid = R.gi->id, cid = R.ci->id;
    if ((rc = state_begin_write()) != NVML_SUCCESS) { state_abort(); END(rc); }
    if ((rc = reresolve(&R, gid, (int)cid)) != NVML_SUCCESS) { state_abort(); END(rc); }
    unsigned pos = (unsigned)(R.ci - R.gi->ci);
    memmove(&R.gi->ci[pos], &R.gi->ci[pos + 1], (R.gi->nci - pos - 1) * sizeof R.gi->ci[0]);
    R.gi->nci--;
    END(state_commit());
}

/* ----- MIG device handles */
EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMig) {
    DEV_BEGIN(device, ALLOW_MIG);
    if (!isMig) END(NVML_ERROR_INVALID_ARGUMENT);
    *isMig = (unsigned)R.is_mig; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    DEV_BEGIN(device, 0);
    if (!count) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->mig_capable) END(NVML_ERROR_NOT_SUPPORTED);
    /* 0 while MIG is disabled, as the real H100 and H200 on driver 580 answered (nvml-raw.json of both) */
    *count = R.s->mig_cur ? R.g->table->max_mig_devices : 0; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig) {
    DEV_BEGIN(device, 0);
    if (!mig) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.g->mig_capable) END(NVML_ERROR_NOT_SUPPORTED);
    if (index >= R.g->table->max_mig_devices) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.s->mig_cur) END(NVML_ERROR_NOT_FOUND);
    /* MIG devices are ordered by GPU instance id, then compute instance id */
    unsigned order[SIM_MAX_GI];
    for (unsigned i = 0; i < R.s->ngi; i++) order[i] = i;
    for (unsigned i = 1; i < R.s->ngi; i++)
        for (unsigned j = i; j > 0 && R.s->gi[order[j]].id < R.s->gi[order[j - 1]].id; j--) { unsigned t = order[j]; order[j] = order[j - 1]; order[j - 1] = t; }
    unsigned n = 0;
    for (unsigned i = 0; i < R.s->ngi; i++) {
        const gi_state *g = &R.s->gi[order[i]];
        unsigned ids[SIM_MAX_CI];
        for (unsigned k = 0; k < g->nci; k++) ids[k] = g->ci[k].id;
        for (unsigned a = 1; a < g->nci; a++) for (unsigned b = a; b > 0 && ids[b] < ids[b - 1]; b--) { unsigned t = ids[b]; ids[b] = ids[b - 1]; ids[b - 1] = t; }
        for (unsigned k = 0; k < g->nci; k++, n++)
            if (n == index) {
                sim_handle *h = pool_get(H_MIGDEV, R.gpu, g->id, ids[k]);
                if (!h) END(NVML_ERROR_MEMORY);
                *mig = h; END(NVML_SUCCESS);
            }
    }
    END(NVML_ERROR_NOT_FOUND);
}
EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    DEV_BEGIN(migDevice, ALLOW_MIG);
    if (!device || !R.is_mig) END(NVML_ERROR_INVALID_ARGUMENT);
    *device = &g_gpu_handles[R.gpu]; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEV_BEGIN(device, ALLOW_MIG);
    if (!id) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.is_mig) END(NVML_ERROR_NOT_SUPPORTED);
    *id = R.gi->id; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEV_BEGIN(device, ALLOW_MIG);
    if (!id) END(NVML_ERROR_INVALID_ARGUMENT);
    if (!R.is_mig) END(NVML_ERROR_NOT_SUPPORTED);
    *id = R.ci->id; END(NVML_SUCCESS);
}
EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *a) {
    DEV_BEGIN(device, ALLOW_MIG);
    if (!a) END(NVML_ERROR_INVALID_ARGUMENT);
    memset(a, 0, sizeof *a);
    if (R.is_mig) {
        ci_profile cp;
        if (!R.gp || ci_profile_get(R.gp, R.ci->profile_id, &cp)) END(NVML_ERROR_UNKNOWN);
        a->multiprocessorCount = cp.sms; a->sharedCopyEngineCount = R.gp->ce; a->sharedDecoderCount = R.gp->dec;
        a->sharedEncoderCount = R.gp->enc; a->sharedJpegCount = R.gp->jpg; a->sharedOfaCount = R.gp->ofa;
        a->gpuInstanceSliceCount = R.gp->slices; a->computeInstanceSliceCount = cp.slices; a->memorySizeMB = R.gp->mem_mb;
    } else {
        if (!R.g->sm_count) END(NVML_ERROR_NOT_SUPPORTED);
        a->multiprocessorCount = R.g->sm_count; a->memorySizeMB = R.g->mem_total / MIB;
        a->gpuInstanceSliceCount = a->computeInstanceSliceCount = R.g->table ? 7 : 0;
    }
    END(NVML_SUCCESS);
}

/* ============================================ simulator control (non-NVML) */
/* Simulated GPU reset: pending MIG mode becomes current (index < 0: all GPUs).
 * Used by nvml-sim-ctl; requires nvmlInit. */
EXPORT nvmlReturn_t nvmlSimResetGpu(int index) {
    LOCK();
    nvmlReturn_t rc;
    if (!g_ref) END(NVML_ERROR_UNINITIALIZED);
    if (index >= (int)g_ngpus) END(NVML_ERROR_INVALID_ARGUMENT);
    if ((rc = state_begin_write()) != NVML_SUCCESS) { state_abort(); END(rc); }
    nvmlReturn_t first = NVML_SUCCESS;
    for (unsigned i = 0; i < g_ngpus; i++) {
        if (index >= 0 && (unsigned)index != i) continue;
        nvmlReturn_t r = reset_one(i);
        if (first == NVML_SUCCESS) first = r;
    }
    if ((rc = state_commit()) != NVML_SUCCESS) END(rc);
    END(first);
}
/* Writes the current (merged) state to the state file. */
EXPORT nvmlReturn_t nvmlSimSaveState(void) {
    LOCK();
    nvmlReturn_t rc;
    if (!g_ref) END(NVML_ERROR_UNINITIALIZED);
    if ((rc = state_begin_write()) != NVML_SUCCESS) { state_abort(); END(rc); }
    END(state_commit());
}
EXPORT const char *nvmlSimStatePath(void) { return g_state_path; }
