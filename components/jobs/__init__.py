"""The job side: a researcher's job description in, the objects that run it on the fast path out. In the order
they build on each other:

    sizing       how big each pod is, from the node it runs on
    checks       what is wrong with a job on a cluster (stack.py reports it for every job of a stack)
    resolve      Resolved, the job with every default filled in; the names and labels of its objects
    files        the job's files, as the ConfigMap its pods mount
    pod          one GPU pod: wiring, placement, volumes, the preflight (preflight.sh) and what it checks
    launch       the torchrun and mpirun commands and the entrypoints around them (*.sh, loaded by shell)
    operator_v1  Training Operator v1: PyTorchJob (with its rendezvous store), MPIJob, TFJob
    runtime_v2   Kubeflow Trainer v2: the runtimes and TrainJobs, the controllers' merge, what an override broke
    trainjob     a job as a TrainJob, and the node shape of the runtimes the platform publishes
    contract     what reviewers see of a job, and what a fault does to it
    component    TrainingJob, which resolves a job and registers what the builders return
    acceptance   FabricAcceptance: nccl-tests across the fabric, run as a job
    sections     its log's marker lines and expected transports, shared with tools/ncclcheck
"""
