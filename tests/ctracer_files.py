"""Run in circuit-tracer 0.5's environment (tests/_ctracer.py's interpreter) by tests/test_files_ctracer.py.

``read SETS_DIR OUT``: every transcoder set in ``SETS_DIR`` (folders written by ``features.save_circuit_tracer``, each
with ``config.yaml`` and an ``x.safetensors`` input) loaded with circuit-tracer's own ``load_transcoder_set`` (what
its ``ReplacementModel.from_config`` does), then each layer's ``encode`` and ``forward`` of ``x`` saved to
``OUT/<set>.safetensors``.

``write OUT``: a graph JSON written with circuit-tracer's own front-end models (``Node.feature_node``,
``Node.logit_node`` with token strings, a feature ``clerp``, a ``transcoder_list``), to ``OUT/theirs.json``; and
``validate PATH``: circuit-tracer's ``Model`` reads our JSON (prints its logit clerps and transcoder_list).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file, save_file


def read(sets_dir: Path, out: Path) -> None:
    from circuit_tracer.transcoder.single_layer_transcoder import load_transcoder_set

    for folder in sorted(p for p in sets_dir.iterdir() if p.is_dir()):
        config = yaml.safe_load((folder / "config.yaml").read_text())
        paths = {i: str(folder / name) for i, name in enumerate(config["transcoders"])}
        tset = load_transcoder_set(paths, config["scan"], config["feature_input_hook"], config["feature_output_hook"],
                                   device=torch.device("cpu"), dtype=torch.float64, lazy_encoder=False,
                                   lazy_decoder=False)  # fmt: skip
        x = load_file(str(folder / "x.safetensors"))["x"]
        result = {}
        for layer, tc in enumerate(tset):
            result[f"encode.{layer}"] = tc.encode(x).contiguous()
            result[f"forward.{layer}"] = tc(x).contiguous()
        save_file(result, str(out / f"{folder.name}.safetensors"))


def write(out: Path) -> None:
    from circuit_tracer.frontend.graph_models import Link, Metadata, Model, Node, QParams

    feature = Node.feature_node(1, 2, 17, influence=0.3, activation=2.5)
    feature.clerp = "closing quote <b>"
    nodes = [
        Node.token_node(0, 5, influence=0.1),
        Node.token_node(2, 9, influence=0.2),
        Node.error_node(0, 2, influence=0.4),
        feature,
        Node.logit_node(2, 11, ' "', 2, target_logit=True, token_prob=0.6),
        Node.logit_node(2, 12, "_", 2, token_prob=0.2),
    ]
    links = [Link(source=nodes[1].node_id, target=feature.node_id, weight=0.7),
             Link(source=feature.node_id, target=nodes[4].node_id, weight=1.1)]  # fmt: skip
    meta = Metadata(slug="t", scan="custom", transcoder_list=["L0.tc", "L1.tc"], prompt_tokens=["<bos>", "a", "b"],
                    prompt="<bos>ab", node_threshold=0.8)  # fmt: skip
    qp = QParams(pinnedIds=[], supernodes=[], linkType="both", clickedId="", sg_pos="")
    model = Model(metadata=meta, qParams=qp, nodes=nodes, links=[link.model_dump() for link in links])
    (out / "theirs.json").write_text(model.model_dump_json())


def validate(path: Path) -> None:
    from circuit_tracer.frontend.graph_models import Model

    model = Model(**json.loads(path.read_text()))
    logits = [n.clerp for n in model.nodes if n.feature_type == "logit"]
    print(json.dumps({"logit_clerps": logits, "transcoder_list": model.metadata.transcoder_list,
                      "feature_clerps": [n.clerp for n in model.nodes if n.feature_type != "logit" and n.clerp]}))  # fmt: skip


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "read":
        read(Path(sys.argv[2]), Path(sys.argv[3]))
    elif command == "write":
        write(Path(sys.argv[2]))
    else:
        validate(Path(sys.argv[2]))
