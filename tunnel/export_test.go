package tunnel

// NameCost is nameCost, for the test that measures it.
const NameCost = nameCost
