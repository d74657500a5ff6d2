package v1alpha1

// Labels kiln-controller puts on the Pods and Services it makes, which the
// node agent and the loops read back.
const (
	// LabelInstance names the Instance a Pod or Service belongs to.
	LabelInstance = "gpu.kiln.dev/instance"
	// LabelInstanceType names the InstanceType of an Instance's Pod.
	LabelInstanceType = "gpu.kiln.dev/instancetype"
	// LabelClaim marks the Pods that run on a Claim's cards, its holder and
	// its Instance's Pod, with the Claim's name. Placement counts such a
	// Pod under its Claim, once, rather than as a Pod of its own.
	LabelClaim = "gpu.kiln.dev/claim"
)

// LabelAccelerators on a namespace, set to AcceleratorsKilnOnly, binds the
// Pod policy of artifacts/policy there: only Kiln makes Pods that get
// accelerators. A Budget's namespace without it is not Guarded.
const (
	LabelAccelerators    = "gpu.kiln.dev/accelerators"
	AcceleratorsKilnOnly = "kiln-only"
)
