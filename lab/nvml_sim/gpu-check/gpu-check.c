/* gpu-check: the lab's validation workload for the remediation loop (docs/remediation.md, step 6) - the stand-in for
 * what a site runs on a real GPU (NVIDIA's CUDA sample image nvcr.io/nvidia/k8s/cuda-sample:vectoradd-*, which needs
 * CUDA and a GPU). It reads the GPU through NVML (libnvidia-ml.so.1 - in the lab the NVML simulator) and fails when:
 *   - the GPU named by $GPUOPS_VALIDATE_UUID is not among the GPUs the container was given ($NVIDIA_VISIBLE_DEVICES,
 *     the device plugin's answer with deviceListStrategy envvar), unless that variable is unset or "void" (a DRA
 *     claim: NVIDIA's DRA driver gives the devices through CDI and sets it to void);
 *   - NVML cannot initialise or does not find the GPU by its UUID (a GPU fallen off the bus);
 *   - the GPU reports volatile uncorrectable ECC errors, a pending page retirement or row remapping.
 * Prints one line per check; exit status 0 when all pass, 1 when a check fails, 2 on bad input.
 * The NVML entry points are looked up with dlsym (no nvml.h needed); their signatures are NVML's public API. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*init_fn)(void);
typedef int (*by_uuid_fn)(const char *, void **);
typedef int (*name_fn)(void *, char *, unsigned);
typedef int (*ecc_fn)(void *, int, int, unsigned long long *);
typedef int (*pending_fn)(void *, int *);
typedef int (*remap_fn)(void *, unsigned *, unsigned *, unsigned *, unsigned *);
typedef const char *(*err_fn)(int);

static int given(const char *uuid, const char *visible) {
    char *copy = strdup(visible), *save = NULL, *tok;
    int found = 0;
    for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (!strcmp(tok, uuid) || !strcmp(tok, "all")) found = 1;
    free(copy);
    return found;
}

int main(int argc, char **argv) {
    const char *uuid = argc > 1 ? argv[1] : getenv("GPUOPS_VALIDATE_UUID");
    const char *visible = getenv("NVIDIA_VISIBLE_DEVICES");
    if (!uuid || !*uuid) { fprintf(stderr, "gpu-check: no GPU UUID (argument or GPUOPS_VALIDATE_UUID)\n"); return 2; }
    if (visible && strcmp(visible, "void") && !given(uuid, visible)) {
        printf("FAIL %s: not given to this container (NVIDIA_VISIBLE_DEVICES=%s)\n", uuid, visible);
        return 1;
    }
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) { printf("FAIL %s: cannot load libnvidia-ml.so.1: %s\n", uuid, dlerror()); return 1; }
    init_fn init = (init_fn)dlsym(lib, "nvmlInit_v2");
    by_uuid_fn by_uuid = (by_uuid_fn)dlsym(lib, "nvmlDeviceGetHandleByUUID");
    name_fn name = (name_fn)dlsym(lib, "nvmlDeviceGetName");
    ecc_fn ecc = (ecc_fn)dlsym(lib, "nvmlDeviceGetTotalEccErrors");
    pending_fn pending = (pending_fn)dlsym(lib, "nvmlDeviceGetRetiredPagesPendingStatus");
    remap_fn remap = (remap_fn)dlsym(lib, "nvmlDeviceGetRemappedRows");
    err_fn err = (err_fn)dlsym(lib, "nvmlErrorString");
    if (!init || !by_uuid || !name || !err) { printf("FAIL %s: libnvidia-ml.so.1 lacks NVML's entry points\n", uuid); return 1; }
    int rc = init();
    if (rc) { printf("FAIL %s: nvmlInit: %s\n", uuid, err(rc)); return 1; }
    void *dev = NULL;
    if ((rc = by_uuid(uuid, &dev))) { printf("FAIL %s: not found by NVML: %s\n", uuid, err(rc)); return 1; }
    char product[96] = "";
    name(dev, product, sizeof product);
    printf("GPU %s: %s\n", uuid, product);
    int bad = 0;
    unsigned long long n = 0;
    /* NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1, NVML_VOLATILE_ECC = 0 */
    if (ecc && (rc = ecc(dev, 1, 0, &n)) == 0) {
        printf("%s volatile uncorrectable ECC errors: %llu\n", n ? "FAIL" : "ok", n);
        bad |= n != 0;
    } else printf("skip ECC: %s\n", ecc ? err(rc) : "no entry point");
    int p = 0;
    if (pending && (rc = pending(dev, &p)) == 0) {
        printf("%s retired pages pending: %s\n", p ? "FAIL" : "ok", p ? "yes" : "no");
        bad |= p != 0;
    } else printf("skip page retirement: %s\n", pending ? err(rc) : "no entry point");
    unsigned corr = 0, unc = 0, pend = 0, fail = 0;
    if (remap && (rc = remap(dev, &corr, &unc, &pend, &fail)) == 0) {
        printf("%s row remapping pending: %s, failure: %s\n", pend || fail ? "FAIL" : "ok", pend ? "yes" : "no",
               fail ? "yes" : "no");
        bad |= pend || fail;
    } else printf("skip row remapping: %s\n", remap ? err(rc) : "no entry point");
    printf("%s %s\n", bad ? "FAIL" : "PASS", uuid);
    return bad ? 1 : 0;
}
