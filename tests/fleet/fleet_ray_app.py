"""The Serve application builder the Ray fleet test deploys (`modelmem place --emit ray
--ray-app fleet_ray_app:build`): one deployment named after the model, whose replica installs
modelmem as PyTorch's CPU allocator under the MODELMEM_ALLOC_CONF its application carries (the
pool string `place` gave it) and answers a request with one inference of torchvision's resnet50
(random weights) and what its pool served, or the pool's refusal of a larger batch; called
through a handle with the batch, or over HTTP at the application's route (`?batch=N`)."""
import os

from ray import serve


@serve.deployment
class Replica:
    def __init__(self, model, replica, device):
        import torch
        import torchvision

        import modelmem.torch

        self.conf = os.environ["MODELMEM_ALLOC_CONF"]
        # Every CPU tensor from here on is the pool's: the weights and the inference.
        self.allocator = modelmem.torch.use_cpu_allocator(self.conf)
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.net = torchvision.models.resnet50(weights=None).eval()
        self.names = {"model": model, "replica": replica, "device": device}

    def __call__(self, batch=1):
        import ray
        import torch

        if hasattr(batch, "query_params"):  # a request through Serve's HTTP proxy: ?batch=N
            batch = int(batch.query_params.get("batch", 1))
        try:
            with torch.inference_mode():
                out = self.net(torch.randn(batch, 3, 224, 224))
        except RuntimeError as e:  # the pool's quota refused a block: say so, stay up
            return dict(self.names, batch=batch, refused=str(e).splitlines()[0],
                        ooms=self.allocator.stats().get("num_ooms", 0))
        stats = self.allocator.stats()
        return dict(self.names, conf=self.conf, pid=os.getpid(), shape=list(out.shape),
                    mkl_fast_mm=os.environ.get("MKL_DISABLE_FAST_MM"),
                    actor_id=ray.get_runtime_context().get_actor_id(),
                    peak_reserved=stats["reserved_bytes.all.peak"],
                    peak_allocated=stats["allocated_bytes.all.peak"],
                    ooms=stats.get("num_ooms", 0), describe=self.allocator.describe())


def build(args):
    return Replica.options(name=args["model"]).bind(args["model"], args["replica"],
                                                    args["device"])
