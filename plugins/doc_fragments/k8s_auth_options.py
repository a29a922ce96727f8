# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuops.k8s_gpu developers
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Connection options of every module of this collection that talks to the Kubernetes API. The option names, types,
# aliases and K8S_AUTH_* environment variables are kubernetes.core's (plugins/module_utils/args_common.py,
# AUTH_ARG_SPEC, tags 3.0.0 to 6.x), so one module_defaults group sets them for our modules and kubernetes.core's.
# The argument spec lives in plugins/module_utils/_cluster/kube/access.py (AUTH_ARG_SPEC); a unit test keeps the two equal.


class ModuleDocFragment(object):

    DOCUMENTATION = r'''
options:
  kubeconfig:
    description:
      - A kubeconfig file (path), several files joined with the platform's path separator, or the kubeconfig itself
        as a dictionary.
      - Environment variable E(K8S_AUTH_KUBECONFIG) when not given.
      - Without O(kubeconfig), O(context) and a complete O(host) login, the in-cluster service account is tried
        first, then the default kubeconfig (E(KUBECONFIG), else C(~/.kube/config)), as kubernetes.core does.
    type: raw
  context:
    description: The kubeconfig context to use instead of its current one. Environment variable E(K8S_AUTH_CONTEXT).
    type: str
  host:
    description: URL of the API server; replaces the kubeconfig's server. Environment variable E(K8S_AUTH_HOST).
    type: str
  api_key:
    description: Bearer token sent to the API server. Environment variable E(K8S_AUTH_API_KEY).
    type: str
  username:
    description:
      - User name for HTTP basic authentication (only for API servers that still accept it).
      - Environment variable E(K8S_AUTH_USERNAME).
    type: str
  password:
    description: Password for O(username). Environment variable E(K8S_AUTH_PASSWORD).
    type: str
  validate_certs:
    description:
      - Check the API server's TLS certificate. Environment variable E(K8S_AUTH_VERIFY_SSL).
      - This collection defaults to V(true) and applies it over the kubeconfig, so a kubeconfig that sets
        C(insecure-skip-tls-verify) needs V(false) here (kubernetes.core leaves it unset by default).
    type: bool
    default: true
    aliases: [verify_ssl]
  ca_cert:
    description: CA certificate file (the whole chain) for the API server. Environment variable E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description: Client certificate file for TLS client authentication. Environment variable E(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description: Key file of O(client_cert). Environment variable E(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
  proxy:
    description:
      - URL of an HTTP proxy for the API connection. Environment variable E(K8S_AUTH_PROXY).
      - E(HTTP_PROXY) and the like are not read.
    type: str
  no_proxy:
    description:
      - Comma-separated hosts, domains and networks reached without O(proxy). Environment variable E(K8S_AUTH_NO_PROXY).
      - Needs the kubernetes Python client 19.15.0 or later.
    type: str
  impersonate_user:
    description: User to act as (C(Impersonate-User) header). Environment variable E(K8S_AUTH_IMPERSONATE_USER).
    type: str
  impersonate_groups:
    description:
      - Groups to act as (C(Impersonate-Group) headers).
      - Environment variable E(K8S_AUTH_IMPERSONATE_GROUPS), comma-separated.
    type: list
    elements: str
requirements:
  - kubernetes (the Kubernetes Python client) >= 12.0.0 on the host that runs the module
  - the kubernetes.core collection (its client module_utils build the connection)
notes:
  - The connection is built by kubernetes.core's C(get_api_client), so it behaves as the kubernetes.core modules do;
    the module group C(gpuops.k8s_gpu.k8s) includes those modules, so one C(module_defaults) entry sets the connection
    for both.
'''
