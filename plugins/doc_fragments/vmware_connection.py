# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)


class ModuleDocFragment(object):

    # Connection to vCenter Server or a standalone ESXi host (pyVmomi)
    DOCUMENTATION = r'''
options:
  hostname:
    description:
      - Name or address of the vCenter Server or the standalone ESXi host.
      - If not set, the environment variable E(VMWARE_HOST) is used.
    type: str
  username:
    description:
      - User name to log in with.
      - If not set, the environment variable E(VMWARE_USER) is used.
    type: str
    aliases: [user]
  password:
    description:
      - Password of O(username).
      - If not set, the environment variable E(VMWARE_PASSWORD) is used.
    type: str
    aliases: [pass, pwd]
  port:
    description:
      - HTTPS port of the vSphere API.
      - If not set, the environment variable E(VMWARE_PORT) is used.
    type: int
    default: 443
  validate_certs:
    description:
      - Validate the server's TLS certificate.
      - Set to V(false) only for a test endpoint with a self-signed certificate.
      - If not set, the environment variable E(VMWARE_VALIDATE_CERTS) is used.
    type: bool
    default: true
requirements:
  - pyVmomi (the C(pyvmomi) package) on the host that runs the module, usually the controller.
'''
