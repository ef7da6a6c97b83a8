"""Operations: what keeps a running cluster healthy without a person.

reaper      ends a training job whose pods cannot start (bad image, missing Secret or volume), and, when the
            stack says so, one that waited to be scheduled past a deadline: the program (stdlib only, shipped
            in a ConfigMap) and its pure decisions
component   the reaper's Deployment, RBAC and ConfigMap
"""
