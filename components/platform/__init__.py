"""The platform a stack installs: one ComponentResource per install, each from a pure builder of its values and
objects, and component.py's Platform, which orders them and publishes the Profile jobs are wired from.
"""
