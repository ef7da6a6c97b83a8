"""The stack file as typed, frozen models, validated before anything is registered.

base     what both schemas share (field types, the model base)
config   the cluster's schema (fastpath:platform) and its rules
job      a job's schema (fastpath:jobs[]), described without a cluster
profile  Profile: what a job needs of the cluster, exported and read back by other projects
stack    loading: a stack file in, every bad key path reported at once (knows the job checks too)
"""
