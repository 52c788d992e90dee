"""A ParameterServerStrategy job whose script parses its flags strictly, with absl.

absl's app.run() refuses any flag it does not define, so this script dies with
"FATAL Flags parsing error: Unknown command line flag 'task_name'" when the launcher appends
the managed service's --task_name/--task_index. Its job file sets `task_flags: false`: every
task learns its role from TF_CONFIG alone, and the hyperparameters (--steps) still arrive as
flags.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no C++ info/warning lines
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # no oneDNN banner

from absl import app, flags

FLAGS = flags.DEFINE_integer("steps", 5, "training steps the chief runs")
LR = flags.DEFINE_float("lr", 0.1, "learning rate")


def main(argv):
    del argv  # absl has taken every flag; nothing else was passed
    import numpy as np
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        os.environ["GRPC_FAIL_FAST"] = "use_caller"
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                      task_index=resolver.task_id,
                                      protocol=resolver.rpc_layer or "grpc", start=True)
        print(f"{resolver.task_type} {resolver.task_id} serving", flush=True)
        server.join()

    tf.keras.utils.set_random_seed(0)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        w = tf.Variable(tf.zeros((4, 1)))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype=np.float32)

    @tf.function
    def train_step():
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(x @ w - y))
            w.assign_sub(LR.value * tape.gradient(loss, w))
            return loss
        return strategy.run(step)

    for step in range(FLAGS.value):
        loss = coordinator.schedule(train_step)
        coordinator.join()
        print(f"chief step {step} loss {loss.fetch():.4f}", flush=True)
    print(f"tensorflow absl ps ok ({FLAGS.value} steps)", flush=True)


if __name__ == "__main__":
    app.run(main)
