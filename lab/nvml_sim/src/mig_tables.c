/* Built-in MIG GPU-instance profile tables.
 * Values follow `nvidia-smi mig -lgip` / `-lgipp` output and NVIDIA's MIG user guide
 * ("Supported MIG Profiles").  Memory sizes are the MiB figures NVML reports
 * (nvidia-smi prints them in GiB, e.g. 9.50 GiB == 9728 MiB). */
#include "sim.h"
#include <string.h>
#include <strings.h>

#define P_1SLICE      NVML_GPU_INSTANCE_PROFILE_1_SLICE
#define P_2SLICE      NVML_GPU_INSTANCE_PROFILE_2_SLICE
#define P_3SLICE      NVML_GPU_INSTANCE_PROFILE_3_SLICE
#define P_4SLICE      NVML_GPU_INSTANCE_PROFILE_4_SLICE
#define P_7SLICE      NVML_GPU_INSTANCE_PROFILE_7_SLICE
#define P_1SLICE_ME   NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1
#define P_2SLICE_ME   NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1
#define P_1SLICE_2X   NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2

/* index, id, name, slices, instances, sms, ce, dec, enc, jpg, ofa, mem_mb, psize, nstarts, starts */
static const sim_mig_table tables[] = {
    { "A100-SXM4-40GB", 8, 7, 7, {
        { P_1SLICE,     19, "1g.5gb",     1, 7, 14, 1, 0, 0, 0, 0,  4864, 1, 7, {0,1,2,3,4,5,6} },
        { P_1SLICE_ME,  20, "1g.5gb+me",  1, 1, 14, 1, 1, 0, 1, 1,  4864, 1, 7, {0,1,2,3,4,5,6} },
        { P_1SLICE_2X,  15, "1g.10gb",    1, 4, 14, 1, 1, 0, 0, 0,  9856, 2, 4, {0,2,4,6} },
        { P_2SLICE,     14, "2g.10gb",    2, 3, 28, 2, 1, 0, 0, 0,  9856, 2, 3, {0,2,4} },
        { P_3SLICE,      9, "3g.20gb",    3, 2, 42, 3, 2, 0, 0, 0, 19968, 4, 2, {0,4} },
        { P_4SLICE,      5, "4g.20gb",    4, 1, 56, 4, 2, 0, 0, 0, 19968, 4, 1, {0} },
        { P_7SLICE,      0, "7g.40gb",    7, 1, 98, 7, 5, 0, 1, 1, 40192, 8, 1, {0} },
    } },
    { "A100-SXM4-80GB", 8, 7, 7, {
        { P_1SLICE,     19, "1g.10gb",    1, 7, 14, 1, 0, 0, 0, 0,  9728, 1, 7, {0,1,2,3,4,5,6} },
        { P_1SLICE_ME,  20, "1g.10gb+me", 1, 1, 14, 1, 1, 0, 1, 1,  9728, 1, 7, {0,1,2,3,4,5,6} },
        { P_1SLICE_2X,  15, "1g.20gb",    1, 4, 14, 1, 1, 0, 0, 0, 19968, 2, 4, {0,2,4,6} },
        { P_2SLICE,     14, "2g.20gb",    2, 3, 28, 2, 1, 0, 0, 0, 19968, 2, 3, {0,2,4} },
        { P_3SLICE,      9, "3g.40gb",    3, 2, 42, 3, 2, 0, 0, 0, 40192, 4, 2, {0,4} },
        { P_4SLICE,      5, "4g.40gb",    4, 1, 56, 4, 2, 0, 0, 0, 40192, 4, 1, {0} },
        { P_7SLICE,      0, "7g.80gb",    7, 1, 98, 7, 5, 0, 1, 1, 81152, 8, 1, {0} },
    } },
    { "H100-SXM5-80GB", 8, 7, 7, {
        { P_1SLICE,     19, "1g.10gb",    1, 7,  16, 1, 1, 0, 1, 0,  9984, 1, 7, {0,1,2,3,4,5,6} },
        { P_1SLICE_ME,  20, "1g.10gb+me", 1, 1,  16, 1, 1, 0, 1, 1,  9984, 1, 7, {0,1,2,3,4,5,6} },
        { P_1SLICE_2X,  15, "1g.20gb",    1, 4,  26, 1, 1, 0, 1, 0, 20096, 2, 4, {0,2,4,6} },
        { P_2SLICE,     14, "2g.20gb",    2, 3,  32, 2, 2, 0, 2, 0, 20096, 2, 3, {0,2,4} },
        { P_3SLICE,      9, "3g.40gb",    3, 2,  60, 3, 3, 0, 3, 0, 40448, 4, 2, {0,4} },
        { P_4SLICE,      5, "4g.40gb",    4, 1,  64, 4, 4, 0, 4, 0, 40448, 4, 1, {0} },
        { P_7SLICE,      0, "7g.80gb",    7, 1, 132, 8, 7, 0, 7, 1, 81152, 8, 1, {0} },
    } },
    { "H100-PCIE-80GB", 8, 7, 7, {
        { P_1SLICE,     19, "1g.10gb",    1, 7,  14, 1, 1, 0, 1, 0,  9984, 1, 7, {0,1,2,3,4,5,6} },
        { P_1SLICE_ME,  20, "1g.10gb+me", 1, 1,  14, 1, 1, 0, 1, 1,  9984, 1, 7, {0,1,2,3,4,5,6} },
        { P_1SLICE_2X,  15, "1g.20gb",    1, 4,  14, 1, 1, 0, 1, 0, 20096, 2, 4, {0,2,4,6} },
        { P_2SLICE,     14, "2g.20gb",    2, 3,  28, 2, 2, 0, 2, 0, 20096, 2, 3, {0,2,4} },
        { P_3SLICE,      9, "3g.40gb",    3, 2,  42, 3, 3, 0, 3, 0, 40448, 4, 2, {0,4} },
        { P_4SLICE,      5, "4g.40gb",    4, 1,  56, 4, 4, 0, 4, 0, 40448, 4, 1, {0} },
        { P_7SLICE,      0, "7g.80gb",    7, 1, 114, 8, 7, 0, 7, 1, 81152, 8, 1, {0} },
    } },
    /* measured: nvmlDeviceGetGpuInstanceProfileInfo(V) and the possible placements on a real NVIDIA H200 (PCI 0x2335),
     * driver 580.159.04, MIG disabled (lab/realgpu/samples/h200-580/nvml-raw.json) */
    { "H200-141GB", 8, 7, 7, {
        { P_1SLICE,     19, "1g.18gb",    1, 7,  16, 1, 1, 0, 1, 0,  16384, 1, 7, {0,1,2,3,4,5,6} },
        { P_1SLICE_ME,  20, "1g.18gb+me", 1, 1,  16, 1, 1, 0, 1, 1,  16384, 1, 7, {0,1,2,3,4,5,6} },
        { P_1SLICE_2X,  15, "1g.35gb",    1, 4,  26, 1, 1, 0, 1, 0,  33280, 2, 4, {0,2,4,6} },
        { P_2SLICE,     14, "2g.35gb",    2, 3,  32, 2, 2, 0, 2, 0,  33280, 2, 3, {0,2,4} },
        { P_3SLICE,      9, "3g.71gb",    3, 2,  60, 3, 3, 0, 3, 0,  71424, 4, 2, {0,4} },
        { P_4SLICE,      5, "4g.71gb",    4, 1,  64, 4, 4, 0, 4, 0,  71424, 4, 1, {0} },
        { P_7SLICE,      0, "7g.141gb",   7, 1, 132, 8, 7, 0, 7, 1, 143360, 8, 1, {0} },
    } },
    { "A30-24GB", 4, 4, 5, {
        { P_1SLICE,     14, "1g.6gb",     1, 4, 14, 1, 0, 0, 0, 0,  5952, 1, 4, {0,1,2,3} },
        { P_1SLICE_ME,  21, "1g.6gb+me",  1, 1, 14, 1, 1, 0, 1, 1,  5952, 1, 4, {0,1,2,3} },
        { P_2SLICE,      5, "2g.12gb",    2, 2, 28, 2, 2, 0, 0, 0, 11968, 2, 2, {0,2} },
        { P_2SLICE_ME,   6, "2g.12gb+me", 2, 1, 28, 2, 2, 0, 1, 1, 11968, 2, 2, {0,2} },
        { P_4SLICE,      0, "4g.24gb",    4, 1, 56, 4, 4, 0, 1, 1, 24000, 4, 1, {0} },
    } },
};

static const struct { const char *alias, *key; } aliases[] = {
    { "A100-40GB", "A100-SXM4-40GB" }, { "A100-PCIE-40GB", "A100-SXM4-40GB" },
    { "A100-80GB", "A100-SXM4-80GB" }, { "A100-PCIE-80GB", "A100-SXM4-80GB" },
    { "H100-80GB", "H100-SXM5-80GB" }, { "H100-SXM-80GB", "H100-SXM5-80GB" },
    { "H100-80GB-HBM3", "H100-SXM5-80GB" }, { "A30", "A30-24GB" },
};

const sim_mig_table *sim_find_mig_table(const char *key) {
    if (!key) return NULL;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcasecmp(aliases[i].alias, key)) { key = aliases[i].key; break; }
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (!strcasecmp(tables[i].key, key)) return &tables[i];
    return NULL;
}

const char *sim_mig_table_keys(void) {
    return "A100-SXM4-40GB A100-SXM4-80GB H100-SXM5-80GB H100-PCIE-80GB H200-141GB A30-24GB "
           "(aliases: A100-40GB A100-PCIE-40GB A100-80GB A100-PCIE-80GB H100-80GB H100-SXM-80GB A30)";
}
