"""Kubeflow Trainer v2 (kubeflow/trainer@v2.3.0, which runs its pods through kubernetes-sigs/jobset@v0.12.0), in
three parts:

    build        the ClusterTrainingRuntimes fastpath publishes and the TrainJobs its jobs become
    controller   what the two controllers make of a TrainJob and its runtime: the JobSet, PodGroup and pods
    judge        the fabric wiring a TrainJob took away from its runtime's pods, for the policy pack and the contract

The job side chooses between this and Training Operator v1 per job (components/jobs/component.py).
"""
