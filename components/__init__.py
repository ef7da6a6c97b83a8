"""fastpath components: typed stack config, the fabric model and the Pulumi components built on them."""
