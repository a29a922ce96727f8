/* Internal types of the NVML simulator. */
#ifndef NVML_SIM_H
#define NVML_SIM_H
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>

#define SIM_MAX_GPUS     64
#define SIM_MAX_PROFILES 16
#define SIM_MAX_GI       8
#define SIM_MAX_CI       8

typedef struct {
    unsigned index;            /* NVML_GPU_INSTANCE_PROFILE_* value */
    unsigned id;               /* profile id reported in info.id, used by Create* */
    char name[32];             /* e.g. "1g.10gb" (reported as "MIG 1g.10gb") */
    unsigned slices;           /* compute (GPC) slices */
    unsigned instances;        /* max instances of this profile */
    unsigned sms, ce, dec, enc, jpg, ofa;
    unsigned long long mem_mb;
    unsigned psize;            /* memory slices occupied by one placement */
    unsigned nstarts;
    unsigned starts[8];        /* allowed placement starts (memory slice index) */
} sim_gi_profile;

typedef struct {
    const char *key;
    unsigned mem_slices;       /* memory slices of the whole GPU (8 for A100/H100, 4 for A30) */
    unsigned max_mig_devices;
    unsigned n;
    sim_gi_profile p[SIM_MAX_PROFILES];
} sim_mig_table;

const sim_mig_table *sim_find_mig_table(const char *key);
const char *sim_mig_table_keys(void);

#endif
