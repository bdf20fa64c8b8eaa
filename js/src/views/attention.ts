// The attention view lives in ./attention/ (one module per concern; see
// ./attention/index.ts); this module keeps its import path.

export { type AttentionTraits, type Diagonal, renderAttention } from "./attention/index";
export { hitTest, mainLayout, stripCells } from "./attention/layout";
