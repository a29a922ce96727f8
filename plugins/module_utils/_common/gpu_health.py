# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU doctor's health knowledge, defined once: the Xid guide, the clock event reasons, the thresholds and the
advice of its health findings. The doctor's checks (_doctor/gpu_doctor_checks.py) judge facts with it; the alert
rules (_cluster/metrics/rules.py) are made from it, so an alert says what the doctor would say.

Plain Python (no Ansible imports, no other module_utils).
"""

from __future__ import annotations

# Xid -> (severity, what it is, what to do); the catalogue's resolution buckets (docs/conformance/doctor-health.md)
XID_GUIDE = {
    13: ('info', 'graphics engine exception (usually the application)', 'restart the application; check its CUDA code'),
    31: ('info', 'GPU memory page fault (usually the application)', 'restart the application; check its CUDA code'),
    43: ('info', 'GPU stopped processing (a channel was reset after an application error)', 'restart the application'),
    45: ('info', 'preemptive cleanup after an application ended', 'nothing, unless other Xids come with it'),
    48: ('critical', 'double-bit ECC error', 'drain the node, reset the GPU; RMA if it recurs'),
    61: ('warning', 'internal micro-controller breakpoint/warning', 'reset the GPU; contact support if it recurs'),
    62: ('critical', 'internal micro-controller halt', 'drain the node and reset the GPU (reboot)'),
    63: ('warning', 'ECC page retirement or row remapping recorded', 'reset the GPU at the next drain to apply it'),
    64: ('critical', 'ECC page retirement or row remapping failure', 'drain the node, reset the GPU; RMA'),
    74: ('critical', 'NVLink error', 'drain the node, reset the GPUs (and check fabric manager); RMA if it recurs'),
    79: ('critical', 'GPU has fallen off the bus',
         'drain the node and reboot it (a VM reboot where the GPU is passed through); check power and PCIe seating; '
         'RMA if it recurs'),
    92: ('warning', 'high single-bit ECC error rate', 'watch the ECC counts; RMA if they grow'),
    94: ('warning', 'contained ECC error (only the affected application was stopped)', 'reset the GPU at the next drain'),
    95: ('critical', 'uncontained ECC error', 'drain the node and reset the GPU; RMA if it recurs'),
    109: ('warning', 'context switch timeout', 'restart the application; reset the GPU if it recurs'),
    119: ('critical', 'GSP RPC timeout', 'drain the node and reset the GPU (reboot); update the driver if it recurs'),
    120: ('critical', 'GSP error', 'drain the node and reset the GPU (reboot); update the driver if it recurs'),
    140: ('critical', 'unrecovered ECC error', 'drain the node, reset the GPU; RMA if it recurs'),
}
# An Xid the table does not know is critical: NVIDIA's device plugin marks a GPU unhealthy on every critical Xid
# except the application ones (13, 31, 43, 45, 68: NVIDIA/k8s-device-plugin internal/rm/health.go), and the
# catalogue keeps adding Xids that need a reset (docs/conformance/doctor-health.md DH-11).
XID_UNKNOWN = ('critical', 'an Xid the doctor has no guidance for',
               'drain the node and look it up in NVIDIA\'s Xid catalogue (docs.nvidia.com/deploy/xid-errors) before '
               'it runs work again; reset the GPU (or reboot) as the catalogue says')
# Xid 154 "GPU recovery action changed from 0x<n> (<label>) to 0x<n> (<label>)": the driver's own summary of what the
# other Xids need (catalogue: XID_154); the doctor reads the label from the kernel log (RECOVERY_LABELS there).
XID_154 = 154

# nvmlClocksEventReason* bits (nvml.h), the names nvidia-smi -q -d PERFORMANCE shows them under
CLOCK_EVENT_REASONS = (
    (0x1, 'gpu_idle'), (0x2, 'applications_clocks_setting'), (0x4, 'sw_power_cap'), (0x8, 'hw_slowdown'),
    (0x10, 'sync_boost'), (0x20, 'sw_thermal_slowdown'), (0x40, 'hw_thermal_slowdown'),
    (0x80, 'hw_power_brake_slowdown'), (0x100, 'display_clock_setting'),
)
# nvidia-smi / NVML: 60 or more retired pages is NVIDIA's RMA threshold for page retirement (pre-Ampere)
RETIRED_PAGES_RMA = 60
SEVERE_CLOCK_REASONS = ('hw_slowdown', 'hw_thermal_slowdown', 'hw_power_brake_slowdown', 'sw_thermal_slowdown')

# "near" the slowdown threshold: this project's margin (NVML has no warning threshold of its own; nvml.h names the
# slowdown threshold the temperature "at which the GPU will begin HW slowdown" and shutdown the one at which it "will
# shut down for HW protection"; NVIDIA's NVSentinel treats a GPU at or past its slowdown threshold as fatal)
TEMPERATURE_NEAR_C = 5
# nvml.h: nvmlDeviceGetPowerUsage is accurate to +/- 5% (Fermi, Kepler) and averaged over one second on Ampere and newer;
# the power limiter holds that average at the enforced limit, so only a reading beyond this tolerance is over it
POWER_TOLERANCE = 0.05

# finding id -> (severity, remediation) of the doctor's health findings that the alert rules share
ADVICE = {
    'ecc_uncorrectable': (
        'critical',
        'Drain the node and reset the GPU (nvidia-smi -r with no process on it, or reboot; a VM reboot where it '
        'is passed through) so row remapping or page retirement takes effect; RMA if the errors come back.'),
    'row_remap_failure': (
        'critical', 'Drain the node and RMA the GPU (NVIDIA\'s RMA policy for row-remapping failures).'),
    'row_remap_pending': (
        'warning',
        'Running work is not affected; at the next drain reset the GPU (nvidia-smi -r, or reboot; a VM reboot '
        'where the GPU is passed through).'),
    'clocks_throttled': (
        'warning',
        'HW slowdown and thermal reasons: check cooling (fans, airflow, inlet temperature) and the power '
        'supply; power brake: the chassis or PSU asserted it (check the BMC log). The GPU works, slower.'),
}
